//! `view(&Model, &mut Frame)`: the model as a frame, and nothing else.
//!
//! Side-effect free: it reads no clock (ages are computed against `model.now`), no file and no
//! environment (the theme and the time zone are in the model), so the same model always draws
//! the same screen. Times are written in `model.zone`, named once in the header; the zone is
//! UTC unless the runtime set the machine's (`TZ`, `/etc/localtime`, as chrono's `Local` reads them).
//! Every string that came from a job was made inert by the probes; it passes through
//! [`inert`] once more here, because a cell is the last gate before the terminal.

use ratatui::Frame;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::layout;
use super::model::{Model, Pane, Row, SPARK_BUCKET_SECS};
use super::theme::{Theme, symbol};
use crate::core::text::{inert, is_mark};
use crate::core::{Assessment, Bucket, Carried, CheckResult, Liveness, Reading};

/// Draws the whole screen.
pub fn view(model: &Model, frame: &mut Frame) {
    let size = frame.area();
    let areas = layout::areas(size.width, size.height, model.zoomed);
    header(model, frame, areas.header);
    if let Some(list) = areas.list {
        action_list(model, frame, list);
    }
    if let Some(detail) = areas.detail {
        detail_pane(model, frame, detail);
    }
    if model.digest.is_some() {
        let body = Rect::new(
            0,
            areas.header.height,
            size.width,
            areas.status.y.saturating_sub(areas.header.height),
        );
        digest_view(model, frame, body);
    } else if model.events.is_some() {
        let body = Rect::new(
            0,
            areas.header.height,
            size.width,
            areas.status.y.saturating_sub(areas.header.height),
        );
        events_view(model, frame, body);
    }
    status_line(model, frame, areas.status);
    if let Some(dialog) = &model.dialog {
        dialog_view(model, dialog, frame, size);
    } else if let Some(chooser) = &model.chooser {
        chooser_view(model, chooser, frame, size);
    }
    if model.help {
        help(model, frame, size);
    }
}

fn header(model: &Model, frame: &mut Frame, area: Rect) {
    if area.height == 0 {
        return;
    }
    let theme = &model.theme;
    let mut spans = vec![Span::styled(" mihari ", theme.heading()), Span::raw("│ ")];
    match model.snapshot.as_ref().map(|s| &s.watcher) {
        Some(watcher) if watcher.is_missing() => {
            spans.push(Span::styled(watcher.words_in(model.zone), theme.alarm()));
        }
        Some(
            crate::engine::WatcherStatus::Alive { .. }
            | crate::engine::WatcherStatus::Passes { .. },
        ) => {
            let words = model
                .snapshot
                .as_ref()
                .map(|s| s.watcher.words_in(model.zone))
                .unwrap_or_default();
            spans.push(Span::styled(words, theme.good()));
        }
        Some(watcher) => spans.push(Span::styled(watcher.words_in(model.zone), theme.warning())),
        None => spans.push(Span::raw("watcher ?")),
    }
    if model
        .snapshot
        .as_ref()
        .is_some_and(|s| s.store_fault.is_some())
    {
        spans.push(Span::styled(" ✖ STORE FAULT", theme.alarm()));
    } else if model
        .snapshot
        .as_ref()
        .is_some_and(|s| s.store_writes_failing.is_some())
    {
        spans.push(Span::styled(" ✖ STORE WRITES FAILING", theme.alarm()));
    }
    if let Some(refused) = model
        .snapshot
        .as_ref()
        .and_then(|s| s.config_refused.as_deref())
    {
        spans.push(Span::styled(format!(" ✖ {refused}"), theme.alarm()));
    }
    spans.push(Span::raw(" │"));
    if let Some(snapshot) = &model.snapshot {
        for (bucket, count) in snapshot.list.counts() {
            let style = if count > 0 {
                theme.bucket(bucket)
            } else {
                theme.dim()
            };
            spans.push(Span::raw(" "));
            spans.push(Span::styled(format!("{} {count}", bucket.as_str()), style));
        }
        let approvals: usize = snapshot
            .list
            .rows()
            .map(|row| row.pending_approvals.len())
            .sum();
        if approvals > 0 {
            spans.push(Span::styled(
                format!(" ⚑ APPROVALS {approvals}"),
                theme.alarm(),
            ));
        }
        if snapshot.polled_folders > 0 {
            spans.push(Span::styled(
                format!(" ⚠ POLLING {}", snapshot.polled_folders),
                theme.warning(),
            ));
        }
        let total = snapshot.list.actions.len() + snapshot.list.rest.len();
        spans.push(Span::styled(format!(" │ {total} jobs"), theme.dim()));
    }
    // The zone is named here, once; every other time on the screen is in it.
    let zone = model.zone.name(model.now);
    let hhmm = model.zone.format(model.now, "%H:%M");
    let mut clock = format!("{hhmm} {zone}");
    let width = usize::from(area.width);
    let length = |spans: &[Span]| {
        spans
            .iter()
            .map(|s| s.content.chars().count())
            .sum::<usize>()
    };
    if length(&spans) + clock.chars().count() + 2 > width {
        // Its abbreviation alone still names the zone ("21:30 JST").
        clock = format!("{hhmm} {}", zone.split(" (").next().unwrap_or(&zone));
    }
    if length(&spans) + clock.len() + 2 > width && model.snapshot.is_some() {
        // The clock matters more than the job count on a narrow screen.
        spans.pop();
    }
    let used = length(&spans);
    if used + clock.len() + 2 <= width {
        spans.push(Span::raw(" ".repeat(width - used - clock.len() - 1)));
        spans.push(Span::raw(clock));
    }
    let mut lines = vec![Line::from(spans)];
    if area.height > 1 {
        let second = match &model.snapshot {
            _ if model.banner.is_some() => {
                let banner = model
                    .banner
                    .as_ref()
                    .map(|c| inert(&c.message))
                    .unwrap_or_default();
                Line::from(Span::styled(format!(" ⚠ NOW: {banner}"), theme.alarm()))
            }
            Some(crate::engine::Snapshot {
                store_fault: Some(fault),
                ..
            }) => Line::from(Span::styled(
                format!(" ✖ state store: {}", inert(fault)),
                theme.alarm(),
            )),
            Some(snapshot) => match &snapshot.list.dispatch_held {
                Some(why) => Line::from(Span::styled(
                    format!(
                        " ⚠ dispatch held: nothing new is dispatched while {}",
                        inert(why)
                    ),
                    theme.alarm(),
                )),
                None => match snapshot.notices.first() {
                    Some(notice) => {
                        Line::from(Span::styled(format!(" {}", inert(notice)), theme.warning()))
                    }
                    None => Line::raw(""),
                },
            },
            None => Line::from(Span::styled(" gathering evidence…", theme.dim())),
        };
        lines.push(second);
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// One column of the action list: its width, and how readily it is dropped when narrow
/// (higher goes first).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    State,
    Liveness,
    Progress,
    Spark,
    Eta,
    Age,
    Owner,
}

const SPARK_CELLS: usize = 8;

impl Column {
    fn width(self) -> usize {
        match self {
            Column::State => 17,
            Column::Liveness => 7,
            Column::Progress => 15,
            Column::Spark => SPARK_CELLS,
            Column::Eta => 6,
            Column::Age => 5,
            Column::Owner => 12,
        }
    }
}

/// The columns that fit in `width` after the symbol and the id, in display order.
fn columns(width: usize, id_width: usize) -> Vec<Column> {
    // Kept in this order of importance while they fit.
    let by_importance = [
        Column::State,
        Column::Age,
        Column::Progress,
        Column::Liveness,
        Column::Eta,
        Column::Spark,
        Column::Owner,
    ];
    let mut room = width.saturating_sub(3 + id_width + 2);
    let mut chosen = Vec::new();
    for column in by_importance {
        if column.width() < room {
            room -= column.width() + 1;
            chosen.push(column);
        }
    }
    let display = [
        Column::State,
        Column::Liveness,
        Column::Progress,
        Column::Spark,
        Column::Eta,
        Column::Age,
        Column::Owner,
    ];
    display.into_iter().filter(|c| chosen.contains(c)).collect()
}

fn action_list(model: &Model, frame: &mut Frame, area: Rect) {
    let theme = &model.theme;
    let mut title = vec![Span::styled(" action list ", theme.heading())];
    if !model.filter.is_empty() {
        title.push(Span::styled(
            format!("· filter '{}' ", inert(&model.filter)),
            theme.warning(),
        ));
    }
    let border = if model.focus == Pane::List {
        theme.focused_border()
    } else {
        theme.dim()
    };
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(border)
        .title(Line::from(title));
    let inner = block.inner(area);
    frame.render_widget(block, area);

    let Some(snapshot) = &model.snapshot else {
        frame.render_widget(
            Paragraph::new(Span::styled(" gathering evidence…", theme.dim())),
            inner,
        );
        return;
    };
    let rows = model.rows();
    if rows.is_empty() {
        let text = if model.jobs.is_empty() {
            format!(
                " no jobs declared in '{}': add some under 'jobs:' (see jobs.example.yaml)",
                inert(&model.source.display().to_string())
            )
        } else {
            format!(
                " no job matches the filter '{}' (Esc clears it)",
                inert(&model.filter)
            )
        };
        frame.render_widget(Paragraph::new(text).style(theme.dim()), inner);
        return;
    }
    let id_width = rows
        .iter()
        .filter_map(|r| match r {
            Row::Job(a) => Some(a.id.chars().count()),
            Row::Heading { .. } | Row::Rule(_) => None,
        })
        .max()
        .unwrap_or(8)
        .clamp(8, 20);
    let width = usize::from(inner.width);
    let cols = columns(width, id_width);
    let lines: Vec<Line> = rows
        .iter()
        .skip(model.list_scroll)
        .take(usize::from(inner.height))
        .map(|row| match row {
            Row::Heading { bucket, count } => heading_line(model, *bucket, *count, snapshot),
            Row::Job(a) => job_line(model, a, id_width, &cols, width),
            Row::Rule(rule) => Line::styled(
                format!(" ✖ {}", model.zone.rewrite_utc_stamps(&inert(rule))),
                model.theme.alarm(),
            ),
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

fn heading_line(
    model: &Model,
    bucket: Option<Bucket>,
    count: usize,
    snapshot: &crate::engine::Snapshot,
) -> Line<'static> {
    let theme = &model.theme;
    match bucket {
        Some(bucket) => {
            let mut spans = vec![Span::styled(
                format!("{} {count}", bucket.as_str()),
                theme.bucket(bucket),
            )];
            if bucket == Bucket::Dispatch
                && let Some(why) = &snapshot.list.dispatch_held
            {
                spans.push(Span::styled(
                    format!(" · held while {}", inert(why)),
                    theme.alarm(),
                ));
            }
            Line::from(spans)
        }
        None => Line::from(Span::styled(format!("NO ACTION {count}"), theme.heading())),
    }
}

fn job_line(
    model: &Model,
    row: &Assessment,
    id_width: usize,
    cols: &[Column],
    width: usize,
) -> Line<'static> {
    let theme = &model.theme;
    let selected = model.selected.as_deref() == Some(row.id.as_str());
    let approval = if row.pending_approvals.is_empty() {
        " "
    } else {
        "⚑"
    };
    let mut spans = vec![
        Span::styled(format!(" {} ", symbol(row.state)), theme.state(row.state)),
        Span::raw(pad(&inert(&row.id), id_width)),
        Span::styled(approval, theme.alarm()),
    ];
    for column in cols {
        spans.push(Span::raw(" "));
        let (text, style) = match column {
            Column::State => (row.state.as_str().to_string(), theme.state(row.state)),
            Column::Liveness => (
                row.liveness.map_or("-", Liveness::as_str).to_string(),
                match row.liveness {
                    Some(Liveness::Alive) => theme.good(),
                    Some(Liveness::Dead) => theme.alarm(),
                    Some(Liveness::Unknown) => theme.warning(),
                    None => theme.dim(),
                },
            ),
            Column::Progress => (progress_text(row), Style::default()),
            Column::Spark => (sparkline(model, &row.id), theme.good()),
            Column::Eta => (eta_text(model, row), theme.dim()),
            Column::Age => (
                model.age_now(row).map_or("-".to_string(), fmt_age),
                Style::default(),
            ),
            Column::Owner => (
                model
                    .job(&row.id)
                    .and_then(|j| j.owner.as_deref())
                    .map(inert)
                    .unwrap_or_default(),
                theme.dim(),
            ),
        };
        spans.push(Span::styled(pad(&text, column.width()), style));
    }
    let mut line = Line::from(spans);
    if selected {
        let used: usize = line.spans.iter().map(|s| s.content.chars().count()).sum();
        if used < width {
            line.spans.push(Span::raw(" ".repeat(width - used)));
        }
        line = line.patch_style(theme.selected());
    }
    line
}

/// Pads or cuts `text` to exactly `width` columns (a combining mark takes none, and stays
/// with its character when the text is cut).
pub(crate) fn pad(text: &str, width: usize) -> String {
    let count = text.chars().filter(|c| !is_mark(*c)).count();
    if count <= width {
        format!("{text}{}", " ".repeat(width - count))
    } else if width == 0 {
        String::new()
    } else {
        let mut columns = 0;
        let mut cut = String::new();
        for c in text.chars() {
            if !is_mark(c) {
                if columns == width - 1 {
                    break;
                }
                columns += 1;
            }
            cut.push(c);
        }
        cut.push('…');
        cut
    }
}

fn progress_text(row: &Assessment) -> String {
    match (row.done, row.expected_total) {
        (Some(done), Some(total)) if total > 0 => {
            format!(
                "{done}/{total} {}%",
                (done.saturating_mul(100) / total).min(100)
            )
        }
        (_, None) if row.percent.is_some() => format!("{:.0}%", row.percent.unwrap_or(0.0)),
        (Some(done), _) => format!("{done}"),
        (None, Some(total)) => format!("?/{total}"),
        (None, None) => "-".to_string(),
    }
}

/// An age as the list shows it: whole seconds under 10 s, tens of seconds under a minute,
/// then minutes, hours and days. The steps match [`super::model::age_step`].
pub fn fmt_age(secs: f64) -> String {
    let s = secs.max(0.0) as i64;
    match s {
        0..=9 => format!("{s}s"),
        10..=59 => format!("{}s", s / 10 * 10),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86_400),
    }
}

/// Items per second over the recorded history, when there is enough of it.
fn rate(model: &Model, id: &str) -> Option<f64> {
    let samples = model.history.get(id)?;
    let (t0, d0) = *samples.front()?;
    let (t1, d1) = *samples.back()?;
    let secs = (t1 - t0).num_milliseconds() as f64 / 1000.0;
    (secs >= 5.0 && d1 > d0).then(|| (d1 - d0) as f64 / secs)
}

fn eta_text(model: &Model, row: &Assessment) -> String {
    let (Some(done), Some(total)) = (row.done, row.expected_total) else {
        return "-".to_string();
    };
    if done >= total {
        return "done".to_string();
    }
    if row.state != crate::core::State::Running {
        return "-".to_string();
    }
    // The engine's (or the job's own, tqdm's) ETA first; the screen's samples otherwise.
    let eta = row
        .eta_sec
        .or_else(|| rate(model, &row.id).map(|per_sec| (total - done) as f64 / per_sec));
    match eta {
        Some(secs) => {
            let s = secs as i64;
            match s {
                0..=59 => format!("{s}s"),
                60..=3599 => format!("{}m", s / 60),
                3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
                _ => format!("{}d", s / 86_400),
            }
        }
        None => "-".to_string(),
    }
}

/// The recent progress rate as [`SPARK_CELLS`] cells of [`SPARK_BUCKET_SECS`] each, newest
/// on the right: how many items were done in each.
pub fn sparkline(model: &Model, id: &str) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let Some(samples) = model.history.get(id) else {
        return String::new();
    };
    // Each increase is spread evenly over the time between its two samples, so a burst
    // seen late does not pile up in one cell.
    let mut cells = [0f64; SPARK_CELLS];
    let span_ms = (SPARK_BUCKET_SECS * 1000) as f64;
    let window_start =
        model.now - chrono::Duration::seconds(SPARK_BUCKET_SECS * SPARK_CELLS as i64);
    for pair in samples.iter().collect::<Vec<_>>().windows(2) {
        let (&(t0, d0), &(t1, d1)) = (pair[0], pair[1]);
        if d1 <= d0 || t1 <= t0 {
            continue;
        }
        let total_ms = (t1 - t0).num_milliseconds() as f64;
        let per_ms = (d1 - d0) as f64 / total_ms;
        for (i, cell) in cells.iter_mut().enumerate() {
            let start = window_start + chrono::Duration::milliseconds((i as f64 * span_ms) as i64);
            let end = start + chrono::Duration::milliseconds(span_ms as i64);
            let overlap = (t1.min(end) - t0.max(start)).num_milliseconds().max(0) as f64;
            *cell += overlap * per_ms;
        }
    }
    let top = cells.iter().copied().fold(0.0, f64::max);
    if top <= 0.0 {
        return if samples.len() > 1 {
            "▁".repeat(SPARK_CELLS)
        } else {
            String::new()
        };
    }
    cells
        .iter()
        .map(|&n| {
            if n <= 0.0 {
                ' '
            } else {
                BARS[((n / top * 7.0).ceil() as usize).min(7)]
            }
        })
        .collect()
}

fn detail_pane(model: &Model, frame: &mut Frame, area: Rect) {
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
        symbol(row.state),
        row.state.as_str(),
        row.bucket.map_or("needs nothing", Bucket::as_str)
    );
    match (row.liveness, row.pid) {
        (Some(l), Some(pid)) => summary.push_str(&format!(" · {} pid {pid}", l.as_str())),
        (Some(l), None) => summary.push_str(&format!(" · {}", l.as_str())),
        (None, _) => summary.push_str(" · no lock held"),
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
    // is not running.
    if let Some(run) = evidence.and_then(|e| e.history.last_run.as_ref()) {
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
                "  automatic: {}",
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
        text(format!("  blocked: {why}"), theme.warning(), &mut out);
    }
    match job.restart.as_ref().and_then(|r| r.command.as_ref()) {
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
            "  no restart.command declared: a human restarts it by hand".to_string(),
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

/// The log tail of the selected job, as lines of the pane: its heading, then one terminal
/// line per log line (each its last carriage-return frame, cut to the width, never wrapped),
/// newest last; the lines from a rotated predecessor first, under where they are. Empty when
/// the job declares no log.
pub fn tail_block(model: &Model, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(20));
    let theme = &model.theme;
    let mut out: Vec<Line<'static>> = Vec::new();
    let Some(id) = model.selected.as_deref() else {
        return out;
    };
    let Some(log) = model.job(id).and_then(|job| job.log.as_ref()) else {
        return out;
    };
    let evidence = model.snapshot.as_ref().and_then(|s| s.evidence_of(id));
    let text = |line: String, style: Style, out: &mut Vec<Line<'static>>| {
        for piece in wrap(&line, width) {
            out.push(Line::styled(piece, style));
        }
    };
    let one_line = |line: &str| {
        pad(&format!("  {}", inert(line)), width)
            .trim_end()
            .to_string()
    };
    let tail = model.tail.as_ref().filter(|t| t.job == id);
    let scrolled = if model.tail_scroll > 0 {
        format!(" · scrolled up {} lines · G: newest", model.tail_scroll)
    } else {
        String::new()
    };
    // Where the earlier lines are is said in the heading, which is always in view.
    let earlier_in = tail
        .and_then(|t| t.earlier.as_ref())
        .and_then(|earlier| earlier.path.file_name())
        .map(|name| format!(" · earlier lines in '{}'", inert(&name.to_string_lossy())))
        .unwrap_or_default();
    out.push(Line::styled(
        pad(
            &format!("Log tail (newest last){earlier_in}{scrolled}"),
            width,
        )
        .trim_end()
        .to_string(),
        theme.heading(),
    ));
    if let Some(earlier) = tail.and_then(|t| t.earlier.as_ref()) {
        text(
            format!(
                "  ── earlier lines, in '{}' (rotated) ──",
                inert(&earlier.path.display().to_string())
            ),
            theme.dim(),
            &mut out,
        );
        for line in &earlier.lines {
            out.push(Line::styled(one_line(line), Style::default()));
        }
        text(
            format!(
                "  ── '{}' since the rotation ──",
                inert(&log.display().to_string())
            ),
            theme.dim(),
            &mut out,
        );
    }
    match tail.map(|t| &t.lines) {
        Some(Reading::Found(lines)) => {
            for line in lines {
                out.push(Line::styled(one_line(line), Style::default()));
            }
        }
        Some(Reading::Empty) => {
            let seen = evidence
                .and_then(|e| e.log.as_ref())
                .and_then(|r| r.found());
            let missing = evidence.and_then(|e| e.log_missing.as_deref());
            let words = match (missing, seen.and_then(|s| s.carried.as_ref())) {
                (Some(missing), _) => format!("  (missing: {})", inert(missing)),
                (None, Some(Carried::Rotated(path))) => format!(
                    "  (empty since it was rotated: its last lines are in '{}')",
                    inert(&path.display().to_string())
                ),
                _ => format!(
                    "  (empty: '{}' has nothing yet)",
                    inert(&log.display().to_string())
                ),
            };
            text(words, theme.dim(), &mut out)
        }
        Some(Reading::Fault(error)) => text(
            format!("  fault: {}", inert(error)),
            theme.alarm(),
            &mut out,
        ),
        None => text("  loading…".to_string(), theme.dim(), &mut out),
    }
    out
}

/// One pending approval in words: step, summary, who asked and when (in the header's zone),
/// and the key the operator can type back at `mihari approval approve`.
fn approval_words(model: &Model, approval: &crate::core::PendingApproval) -> String {
    super::chooser::approval_words(model.zone, model.now, approval)
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
fn evidence_rows(
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

fn bytes(n: u64) -> String {
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// Splits `text` into pieces of at most `width` characters, at spaces where it can. Wrapped
/// pieces are indented like the first so lists stay readable. A combining mark counts as no
/// column and stays with the character it sits on (900 of them used to take nine rows).
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let indent: String = text.chars().take_while(|c| *c == ' ').collect();
    let indent = if indent.len() + 10 < width {
        format!("{indent}  ")
    } else {
        String::new()
    };
    // One entry per character with the marks that follow it: what one column shows.
    let mut rest: Vec<&str> = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices().skip(1) {
        if !is_mark(c) {
            rest.push(&text[start..at]);
            start = at;
        }
    }
    if start < text.len() {
        rest.push(&text[start..]);
    }
    let mut pieces = Vec::new();
    let mut first = true;
    while !rest.is_empty() {
        let room = if first {
            width
        } else {
            width.saturating_sub(indent.chars().count()).max(1)
        };
        if rest.len() <= room {
            let piece: String = rest.concat();
            pieces.push(if first {
                piece
            } else {
                format!("{indent}{piece}")
            });
            break;
        }
        let cut = rest[..room]
            .iter()
            .rposition(|c| *c == " ")
            .filter(|&at| at > room / 3)
            .unwrap_or(room);
        let piece: String = rest[..cut].concat();
        pieces.push(if first {
            piece
        } else {
            format!("{indent}{piece}")
        });
        rest.drain(..cut);
        let spaces = rest.iter().take_while(|c| **c == " ").count();
        rest.drain(..spaces);
        first = false;
    }
    if pieces.is_empty() {
        pieces.push(String::new());
    }
    pieces
}

fn status_line(model: &Model, frame: &mut Frame, area: Rect) {
    if area.height == 0 {
        return;
    }
    let theme = &model.theme;
    let line = if model.filter_editing {
        Line::from(vec![
            Span::styled(" filter: ", theme.heading()),
            Span::raw(format!("{}▏", inert(&model.filter))),
            Span::styled("  Enter keeps · Esc clears", theme.dim()),
        ])
    } else if let Some(status) = &model.status {
        Line::from(Span::styled(
            format!(" {}", model.zone.rewrite_utc_stamps(&inert(status))),
            theme.warning(),
        ))
    } else {
        // Quit and help first: a narrow screen cuts from the right.
        let mut hints =
            " q quit  ? help  ↑↓ move  ⏎ detail  r restart  x release  a approve  e events  / filter  p pause  K ack"
                .to_string();
        if !model.filter.is_empty() {
            hints.push_str("  · Esc clears the filter");
        }
        Line::from(Span::styled(hints, theme.dim()))
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// Every key, as `?` shows it.
pub const KEYS: [(&str, &str); 20] = [
    ("↑ ↓  j k", "move the selection, or scroll the detail"),
    ("PgUp PgDn", "a page up or down"),
    ("g G  Home End", "first or last"),
    ("Enter", "open or close the detail of the selected job"),
    ("Tab", "switch between the list and the detail"),
    ("l", "the log, newest last: ↑↓ scroll it, G newest, l back"),
    (
        "/",
        "filter by id, owner or state (Enter keeps, Esc clears)",
    ),
    ("Esc", "close the detail, or clear the filter"),
    ("R", "gather every job's evidence again now"),
    (
        "r",
        "restart the selected job (RESTART, DISPATCH): a dialog",
    ),
    (
        "x",
        "release a dead holder's lock (DEAD_LOCK_STALE): a dialog",
    ),
    ("M", "release a stale marker (STALE); choose when several"),
    (
        "a",
        "approve or deny a pending step (choose one of several)",
    ),
    ("p  K", "pause or resume (p), acknowledge broken rules (K)"),
    ("e", "the event log of the job (a: all jobs)"),
    ("D", "the daily digest (m marks it read)"),
    ("mouse", "wheel scrolls, click selects"),
    ("?", "this help (any key closes it)"),
    ("q  Ctrl-C", "quit (the jobs keep running)"),
    ("NO_COLOR", "set it for symbols without colour"),
];

fn help(model: &Model, frame: &mut Frame, size: Rect) {
    help_box(frame, size, &model.theme, " keys ", &KEYS, 76);
}

/// The keys of a screen in a box over it, centered, at most `widest` columns wide: the
/// dashboard's and the fleet screen's help.
pub fn help_box(
    frame: &mut Frame,
    size: Rect,
    theme: &Theme,
    title: &str,
    keys: &[(&str, &str)],
    widest: u16,
) {
    let width = size.width.min(widest);
    let height = (keys.len() as u16 + 4).min(size.height);
    let area = centered(size, width, height);
    let key_width = keys
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(8)
        + 2;
    let mut lines = vec![Line::raw("")];
    for (key, what) in keys {
        lines.push(Line::from(vec![
            Span::styled(format!(" {}", pad(key, key_width)), theme.heading()),
            Span::raw(*what),
        ]));
    }
    overlay(frame, area, lines, title, theme.focused_border(), theme);
}

/// `lines` in a box with a centered `title`, drawn over whatever `area` held: the help, the
/// confirmation dialog and the chooser.
pub fn overlay(
    frame: &mut Frame,
    area: Rect,
    lines: Vec<Line<'_>>,
    title: &str,
    border: Style,
    theme: &Theme,
) {
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .border_style(border)
                .title(Span::styled(title.to_string(), theme.heading()))
                .title_alignment(Alignment::Center),
        ),
        area,
    );
}

/// The confirmation dialog, drawn by the one dialog code both screens use.
fn dialog_view(model: &Model, dialog: &super::model::Dialog, frame: &mut Frame, size: Rect) {
    super::dialog::draw(&model.theme, model.zone, model.now, dialog, frame, size);
}

/// A chooser, drawn by the one chooser code both screens use.
fn chooser_view(model: &Model, chooser: &super::model::Chooser, frame: &mut Frame, size: Rect) {
    super::chooser::draw(
        &model.theme,
        model.zone,
        model.now,
        chooser,
        "",
        frame,
        size,
    );
}

fn events_view(model: &Model, frame: &mut Frame, area: Rect) {
    let Some(view) = &model.events else {
        return;
    };
    let theme = &model.theme;
    let scope = match &view.job {
        Some(job) => format!("job {}", inert(job)),
        None => "all jobs".to_string(),
    };
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(theme.focused_border())
        .title(Span::styled(
            format!(" events: {scope} (a: job/all · e or Esc: close) "),
            theme.heading(),
        ));
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    let rows = match &view.rows {
        Ok(rows) => rows,
        Err(error) => {
            frame.render_widget(
                Paragraph::new(format!(" cannot read the event log: {}", inert(error)))
                    .style(theme.alarm()),
                inner,
            );
            return;
        }
    };
    if rows.is_empty() {
        frame.render_widget(Paragraph::new(" no events yet").style(theme.dim()), inner);
        return;
    }
    let height = usize::from(inner.height);
    let end = rows
        .len()
        .saturating_sub(view.scroll.min(rows.len().saturating_sub(1)));
    let start = end.saturating_sub(height);
    let lines: Vec<Line> = rows[start..end]
        .iter()
        .map(|event| {
            let style = match event.kind.as_str() {
                "failed" | "refused" | "cap-reached" | "duplicate" => theme.alarm(),
                "cooldown-suppressed" | "declined" | "skipped" => theme.warning(),
                "verified" | "released" | "approved" => theme.good(),
                _ => Style::default(),
            };
            let mut text = format!(
                " {} {:<19} {:<14} {:<8}",
                model.zone.format(event.at, "%m-%d %H:%M:%S"),
                event.kind,
                event
                    .job
                    .as_deref()
                    .map(inert)
                    .unwrap_or_else(|| "-".into()),
                event.actor.as_str()
            );
            if let Some(route) = &event.route {
                text.push_str(&format!(" route {}", inert(route)));
            }
            if let Some(reason) = &event.reason {
                text.push_str(&format!(
                    " {}",
                    model.zone.rewrite_utc_stamps(&inert(reason))
                ));
            }
            Line::styled(pad(&text, usize::from(inner.width)), style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

/// A digest report's lines in the header's zone.
fn digest_lines(model: &Model, report: &crate::core::digest::DigestReport) -> Vec<String> {
    match model.zone {
        crate::probe::zone::Zone::Utc => report.lines(&chrono::Utc),
        crate::probe::zone::Zone::Local => report.lines(&chrono::Local),
    }
}

/// The daily digest: the newest one not yet marked read, grouped by job, then the queue since
/// the last cut. Times in the header's zone, like the rest of the screen.
fn digest_view(model: &Model, frame: &mut Frame, area: Rect) {
    let Some(view) = &model.digest else {
        return;
    };
    let theme = &model.theme;
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(theme.focused_border())
        .title(Span::styled(
            " digest (m: mark read · D or Esc: close) ",
            theme.heading(),
        ));
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    let view = match view {
        Ok(view) => view,
        Err(error) => {
            frame.render_widget(
                Paragraph::new(format!(" cannot read the digest: {}", inert(error)))
                    .style(theme.alarm()),
                inner,
            );
            return;
        }
    };
    let width = usize::from(inner.width);
    let mut lines: Vec<Line> = Vec::new();
    match &view.latest {
        Some(digest) => {
            lines.push(Line::styled(
                format!(
                    " digest {} cut {} · {} items",
                    digest.id,
                    model.zone.format(digest.cut, "%Y-%m-%d %H:%M"),
                    digest.items.len()
                ),
                theme.heading(),
            ));
            let report = crate::core::digest::report(&digest.items, &view.previous);
            for line in digest_lines(model, &report) {
                let style = if line.trim_start().starts_with('!') {
                    theme.alarm()
                } else {
                    Style::default()
                };
                for piece in wrap(&format!(" {line}"), width.saturating_sub(1).max(10)) {
                    lines.push(Line::styled(piece, style));
                }
            }
        }
        None => lines.push(Line::styled(
            " no digest waiting: none cut yet, or the last one is marked read",
            theme.dim(),
        )),
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!(" queued since the last cut: {} items", view.pending.len()),
        theme.heading(),
    ));
    if !view.pending.is_empty() {
        let report = crate::core::digest::report(&view.pending, &[]);
        for line in digest_lines(model, &report) {
            for piece in wrap(&format!(" {line}"), width.saturating_sub(1).max(10)) {
                lines.push(Line::styled(piece, theme.dim()));
            }
        }
    }
    let shown: Vec<Line> = lines
        .into_iter()
        .skip(view.scroll)
        .take(usize::from(inner.height))
        .collect();
    frame.render_widget(Paragraph::new(shown), inner);
}

/// A box `width` wide and `height` tall (at most the screen's) in the middle of `size`: where
/// a dialog goes.
pub(crate) fn centered(size: Rect, width: u16, height: u16) -> Rect {
    let height = height.min(size.height);
    Rect::new(
        size.x + (size.width.saturating_sub(width)) / 2,
        size.y + (size.height.saturating_sub(height)) / 2,
        width,
        height,
    )
}

//! The action list: its headings in the fixed order, one line per job with its columns
//! (state, liveness, progress, sparkline, ETA, age, owner) as the width allows, and the
//! broken rules that belong to no job.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::text::{fmt_age, pad};
use crate::core::text::inert;
use crate::core::{Assessment, Bucket, Liveness};
use crate::tui::model::{Model, Pane, Row, SPARK_BUCKET_SECS};
use crate::tui::theme::symbol;

/// One column of the action list: its width, and how readily it is dropped when narrow
/// (higher goes first).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Column {
    State,
    Liveness,
    Progress,
    Spark,
    Eta,
    Age,
    Owner,
}

pub(super) const SPARK_CELLS: usize = 8;

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
pub(super) fn columns(width: usize, id_width: usize) -> Vec<Column> {
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

pub(super) fn action_list(model: &Model, frame: &mut Frame, area: Rect) {
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

pub(super) fn heading_line(
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

pub(super) fn job_line(
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

pub(super) fn progress_text(row: &Assessment) -> String {
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

/// Items per second over the recorded history, when there is enough of it.
pub(super) fn rate(model: &Model, id: &str) -> Option<f64> {
    let samples = model.history.get(id)?;
    let (t0, d0) = *samples.front()?;
    let (t1, d1) = *samples.back()?;
    let secs = (t1 - t0).num_milliseconds() as f64 / 1000.0;
    (secs >= 5.0 && d1 > d0).then(|| (d1 - d0) as f64 / secs)
}

pub(super) fn eta_text(model: &Model, row: &Assessment) -> String {
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

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
use crate::tui::model::{Model, Pane, Row, SPARK_BUCKET_SECS, Section};
use crate::tui::theme::mark;

/// One column of the action list.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Column {
    State,
    Liveness,
    Progress,
    Spark,
    Eta,
    Age,
    Owner,
    /// Why the job is where it is, in a few words: the rest of the line.
    Why,
}

pub(super) const SPARK_CELLS: usize = 8;

/// The fewest columns the reason keeps before a column of less importance is shown; and as
/// many again before the owner is.
const WHY_AT_LEAST: usize = 20;

impl Column {
    fn title(self) -> &'static str {
        match self {
            Column::State => "STATE",
            Column::Liveness => "HOLDER",
            Column::Progress => "PROGRESS",
            Column::Spark => "RATE",
            Column::Eta => "ETA",
            Column::Age => "AGE",
            Column::Owner => "OWNER",
            Column::Why => "WHY",
        }
    }
}

/// The widths of the columns whose text varies most: the widest age and ETA in view (the one
/// spelling of an age takes from "4 s" to "3 h 05 min"), never narrower than their titles.
pub(super) struct Widths {
    age: usize,
    eta: usize,
}

impl Column {
    fn width(self, widths: &Widths) -> usize {
        match self {
            Column::State => 17,
            Column::Liveness => 7,
            Column::Progress => 15,
            Column::Spark => SPARK_CELLS,
            Column::Eta => widths.eta,
            Column::Age => widths.age,
            Column::Owner => 12,
            Column::Why => WHY_AT_LEAST,
        }
    }
}

/// The columns that fit in `width` after the mark and the id, in display order, and how wide
/// the reason is (it takes what is left).
fn columns(width: usize, id_width: usize, widths: &Widths) -> (Vec<Column>, usize) {
    // Kept in this order of importance while they fit; the owner only while the reason keeps
    // twice its least.
    let by_importance = [
        Column::State,
        Column::Age,
        Column::Why,
        Column::Progress,
        Column::Liveness,
        Column::Eta,
        Column::Spark,
        Column::Owner,
    ];
    let mut room = width.saturating_sub(3 + id_width + 1);
    let mut chosen = Vec::new();
    for column in by_importance {
        let reserve = if column == Column::Owner {
            WHY_AT_LEAST
        } else {
            0
        };
        if column.width(widths) + 1 + reserve <= room {
            room -= column.width(widths) + 1;
            chosen.push(column);
        }
    }
    let why = if chosen.contains(&Column::Why) {
        WHY_AT_LEAST + room
    } else {
        0
    };
    let display = [
        Column::State,
        Column::Liveness,
        Column::Progress,
        Column::Spark,
        Column::Eta,
        Column::Age,
        Column::Owner,
        Column::Why,
    ];
    (
        display.into_iter().filter(|c| chosen.contains(c)).collect(),
        why,
    )
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
    let rows = model.rows();
    let (start, shown, above) =
        model
            .list_window()
            .unwrap_or((0, usize::from(area.height.saturating_sub(3)), false));
    let mut block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(border)
        .title(Line::from(title));
    // What is below the window, on the bottom border: the list never ends silently.
    let below = rows.rows_from(start + shown);
    if below > 0 {
        block = block.title_bottom(Line::styled(
            format!(" ↓ {below} more below "),
            theme.heading(),
        ));
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);

    let Some(snapshot) = &model.snapshot else {
        frame.render_widget(
            Paragraph::new(Span::styled(" gathering evidence…", theme.dim())),
            inner,
        );
        return;
    };
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
    // As wide for every row of the list; unfiltered, that is every job (known once a list,
    // not counted once a frame over 10,000 rows).
    let id_width = if model.filter.is_empty() {
        model.id_chars()
    } else {
        rows.iter()
            .filter_map(|r| match r {
                Row::Job(a) | Row::Approval(a, _) => Some(a.id.chars().count()),
                Row::Heading { .. } | Row::Rule(_) => None,
            })
            .max()
            .unwrap_or(8)
    }
    .clamp(8, 20);
    let in_view = rows.window(start, shown);
    let widest = |text: &dyn Fn(&Assessment) -> String, title: &str| {
        in_view
            .iter()
            .filter_map(|r| match r {
                Row::Job(a) => Some(text(a).chars().count()),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let widths = Widths {
        age: widest(&|a| age_text(model, a), "AGE"),
        eta: widest(&|a| eta_text(model, a), "ETA"),
    };
    let width = usize::from(inner.width);
    let (cols, why_width) = columns(width, id_width, &widths);
    let mut lines: Vec<Line> = vec![column_titles(model, id_width, &cols, &widths, why_width)];
    if above {
        lines.push(above_line(model, &rows.window(0, start), width));
    }
    lines.extend(in_view.into_iter().map(|row| match row {
        Row::Heading { section, count } => heading_line(model, section, count, snapshot),
        Row::Job(a) => job_line(model, a, id_width, &cols, &widths, why_width, width),
        Row::Approval(a, approval) => approval_line(model, a, approval, id_width, width),
        Row::Rule(rule) => Line::styled(
            pad(
                &format!(" ✖ {}", model.zone.rewrite_utc_stamps(&inert(rule))),
                width,
            ),
            model.theme.alarm(),
        ),
    }));
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The line over the rows that names the columns.
fn column_titles(
    model: &Model,
    id_width: usize,
    cols: &[Column],
    widths: &Widths,
    why_width: usize,
) -> Line<'static> {
    let mut text = format!("   {}", pad("JOB", id_width + 1));
    for column in cols {
        text.push(' ');
        let width = match column {
            Column::Why => why_width,
            _ => column.width(widths),
        };
        text.push_str(&pad(column.title(), width));
    }
    Line::styled(text.trim_end().to_string(), model.theme.dim())
}

/// The first line of a list scrolled down: what is above it, by section ("↑ 2 RESTART · 1
/// RED above"), so the head of the action list is never out of view unsaid.
fn above_line(model: &Model, above: &[Row], width: usize) -> Line<'static> {
    let mut counts: Vec<(Section, usize)> = Vec::new();
    let mut section = Section::Rest;
    for row in above {
        match row {
            Row::Heading { section: s, .. } => section = *s,
            Row::Job(_) | Row::Approval(..) | Row::Rule(_) => match counts.last_mut() {
                Some((s, n)) if *s == section => *n += 1,
                _ => counts.push((section, 1)),
            },
        }
    }
    let words: Vec<String> = counts
        .iter()
        .map(|(section, n)| format!("{n} {}", section_name(*section)))
        .collect();
    let mut text = format!(" ↑ {} above", words.join(" · "));
    if text.chars().count() > width {
        // Narrow: the section names shortened, every count kept.
        let words: Vec<String> = counts
            .iter()
            .map(|(section, n)| format!("{n} {}", section_short(*section)))
            .collect();
        text = format!(" ↑ {} above", words.join(" · "));
    }
    let urgent = counts.iter().any(|(s, _)| s.needs_a_human());
    Line::styled(
        text,
        if urgent {
            model.theme.alarm()
        } else {
            model.theme.dim()
        },
    )
}

fn section_short(section: Section) -> &'static str {
    match section {
        Section::Approvals => "APPR",
        Section::Bucket(Bucket::Restart) => "RST",
        Section::Bucket(Bucket::Stale) => "STL",
        Section::Bucket(Bucket::Dispatch) => "DSP",
        Section::Bucket(Bucket::Red) => "RED",
        Section::Rest => "OK",
    }
}

fn section_name(section: Section) -> &'static str {
    match section {
        Section::Approvals => "APPROVALS",
        Section::Bucket(bucket) => bucket.as_str(),
        Section::Rest => "NO ACTION",
    }
}

pub(super) fn heading_line(
    model: &Model,
    section: Section,
    count: usize,
    snapshot: &crate::engine::Snapshot,
) -> Line<'static> {
    let theme = &model.theme;
    match section {
        Section::Approvals => Line::from(Span::styled(
            format!("⚑ APPROVALS {count} · a decides the selected one"),
            theme.alarm(),
        )),
        Section::Bucket(bucket) => {
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
        Section::Rest => Line::from(Span::styled(format!("NO ACTION {count}"), theme.heading())),
    }
}

/// A row's age: how long since its freshest progress, in the one spelling of an age.
fn age_text(model: &Model, row: &Assessment) -> String {
    model.age_now(row).map_or("-".to_string(), fmt_age)
}

pub(super) fn job_line(
    model: &Model,
    row: &Assessment,
    id_width: usize,
    cols: &[Column],
    widths: &Widths,
    why_width: usize,
    width: usize,
) -> Line<'static> {
    let theme = &model.theme;
    let selected = model.is_selected(&Row::Job(row));
    let approval = if row.pending_approvals.is_empty() {
        " "
    } else {
        "⚑"
    };
    // Mark and colour are the bucket's: a RED row whose process is alive is still RED.
    let style = theme.row(row.state, row.bucket);
    let in_bucket = row.bucket.is_some();
    let changed = if model.changed_since_looked(row) {
        "●"
    } else {
        " "
    };
    let mut spans = vec![
        Span::styled(changed, theme.heading()),
        Span::styled(format!("{} ", mark(row.state, row.bucket)), style),
        Span::styled(pad(&inert(&row.id), id_width), style),
        Span::styled(approval, theme.alarm()),
    ];
    for column in cols {
        spans.push(Span::raw(" "));
        let (text, style) = match column {
            Column::State => (row.state.as_str().to_string(), style),
            Column::Liveness => (
                row.liveness.map_or("-", Liveness::as_str).to_string(),
                match row.liveness {
                    // Green only where nothing is wrong: alive is no comfort on a RED row.
                    Some(Liveness::Alive) if !in_bucket => theme.good(),
                    Some(Liveness::Alive) => Style::default(),
                    Some(Liveness::Dead) => theme.alarm(),
                    Some(Liveness::Unknown) => theme.warning(),
                    None => theme.dim(),
                },
            ),
            Column::Progress => (progress_text(row), Style::default()),
            Column::Spark => (
                sparkline(model, &row.id),
                if in_bucket { theme.dim() } else { theme.good() },
            ),
            Column::Eta => (eta_text(model, row), theme.dim()),
            Column::Age => (age_text(model, row), Style::default()),
            Column::Owner => (
                model
                    .job(&row.id)
                    .and_then(|j| j.owner.as_deref())
                    .map(inert)
                    .unwrap_or_default(),
                theme.dim(),
            ),
            Column::Why => (
                model
                    .zone
                    .rewrite_utc_stamps(&inert(&crate::core::why::headline(row))),
                if in_bucket { style } else { theme.dim() },
            ),
        };
        let column_width = match column {
            Column::Why => why_width,
            _ => column.width(widths),
        };
        spans.push(Span::styled(pad(&text, column_width), style));
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

/// A row of the APPROVALS group: the job, the step and what it asks, who asked and when.
fn approval_line(
    model: &Model,
    row: &Assessment,
    approval: &crate::core::PendingApproval,
    id_width: usize,
    width: usize,
) -> Line<'static> {
    let theme = &model.theme;
    let by = approval
        .requested_by
        .as_deref()
        .map(|by| format!(" by {}", inert(by)))
        .unwrap_or_default();
    let words = format!(
        "step '{}': {} · asked{by} {} ago",
        inert(&approval.step),
        inert(&approval.summary),
        fmt_age((model.now - approval.requested).num_milliseconds() as f64 / 1000.0)
    );
    let text = format!(" ⚑ {}  {words}", pad(&inert(&row.id), id_width));
    let mut line = Line::styled(pad(&text, width), theme.alarm());
    if model.is_selected(&Row::Approval(row, approval)) {
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
        Some(secs) => fmt_age(secs),
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

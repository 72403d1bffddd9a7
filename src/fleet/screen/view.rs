//! `view(&FleetModel, &mut Frame)`: the fleet model as a frame, and nothing else.
//!
//! It reads no clock and no file. The pieces are the local dashboard's — its theme, its state
//! symbols, its column padding and wrapping, its confirmation dialog — fed from the hosts'
//! JSON instead of this machine's evidence. Every string that came from a host passes through
//! [`inert`] here, whatever the host already did: a cell is the last gate before the terminal.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use serde_json::Value;

use super::model::{FleetModel, Row};
use crate::core::State;
use crate::core::text::inert;
use crate::tui::theme::symbol;
use crate::tui::view::{fmt_age, pad, wrap};

fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(inert)
        .unwrap_or_default()
}

fn bucket_style(model: &FleetModel, bucket: &str) -> Style {
    let bucket = crate::core::Bucket::ORDER
        .into_iter()
        .find(|b| b.as_str() == bucket);
    bucket.map_or_else(|| model.theme.heading(), |b| model.theme.bucket(b))
}

/// Draws the whole screen.
pub fn view(model: &FleetModel, frame: &mut Frame) {
    let size = frame.area();
    let header = Rect::new(0, 0, size.width, 1.min(size.height));
    let status = Rect::new(
        0,
        size.height.saturating_sub(1),
        size.width,
        1.min(size.height),
    );
    let body_height = size.height.saturating_sub(2);
    let list_height = if model.detail {
        body_height / 2
    } else {
        body_height
    };
    let list = Rect::new(0, 1, size.width, list_height);
    header_line(model, frame, header);
    action_list(model, frame, list);
    if model.detail {
        let detail = Rect::new(0, 1 + list_height, size.width, body_height - list_height);
        detail_pane(model, frame, detail);
    }
    if model.events.is_some() {
        events_view(model, frame, Rect::new(0, 1, size.width, body_height));
    }
    status_line(model, frame, status);
    if let Some(dialog) = &model.dialog {
        crate::tui::dialog::draw(&model.theme, model.zone, model.now, dialog, frame, size);
    }
    if let Some(chooser) = &model.chooser {
        crate::tui::chooser::draw(
            &model.theme,
            model.zone,
            model.now,
            chooser,
            &model.chooser_host,
            frame,
            size,
        );
    }
    if model.help {
        help(model, frame, size);
    }
}

fn header_line(model: &FleetModel, frame: &mut Frame, area: Rect) {
    let theme = &model.theme;
    let red_hosts = model.hosts.iter().filter(|h| h.red.is_some()).count();
    let heard = model.hosts.iter().filter(|h| h.report.is_some()).count();
    let mut spans = vec![
        Span::styled(" mihari fleet ", theme.heading()),
        Span::raw(format!(
            "│ {} host{} ",
            model.hosts.len(),
            if model.hosts.len() == 1 { "" } else { "s" }
        )),
    ];
    if red_hosts > 0 {
        spans.push(Span::styled(format!("✖ {red_hosts} RED "), theme.alarm()));
    }
    if heard + red_hosts < model.hosts.len() {
        spans.push(Span::styled(
            format!("… {} connecting ", model.hosts.len() - heard - red_hosts),
            theme.dim(),
        ));
    }
    spans.push(Span::raw("│"));
    let rules = model.rules().len();
    let jobs = model.jobs();
    for bucket in ["RESTART", "RED", "STALE", "DISPATCH"] {
        let count = jobs
            .iter()
            .filter(|(_, job)| text(job, "bucket") == bucket)
            .count()
            + if bucket == "RED" { rules } else { 0 };
        let style = if count > 0 {
            bucket_style(model, bucket)
        } else {
            theme.dim()
        };
        spans.push(Span::raw(" "));
        spans.push(Span::styled(format!("{bucket} {count}"), style));
    }
    let approvals: usize = jobs
        .iter()
        .map(|(_, job)| {
            job.get("approvals")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        })
        .sum();
    if approvals > 0 {
        spans.push(Span::styled(
            format!(" ⚑ APPROVALS {approvals}"),
            theme.alarm(),
        ));
    }
    spans.push(Span::raw(format!(" │ {}", model.zone.header(model.now))));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn action_list(model: &FleetModel, frame: &mut Frame, area: Rect) {
    let theme = &model.theme;
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(theme.focused_border())
        .title(Span::styled(" fleet action list ", theme.heading()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let rows = model.rows();
    if rows.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled(
                " waiting for the hosts' first lines…",
                theme.dim(),
            )),
            inner,
        );
        return;
    }
    let host_width = model
        .hosts
        .iter()
        .map(|h| h.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 20);
    let id_width = rows
        .iter()
        .filter_map(|r| match r {
            Row::Job { job, .. } => Some(text(job, "id").chars().count()),
            _ => None,
        })
        .max()
        .unwrap_or(8)
        .clamp(8, 24);
    let width = usize::from(inner.width);
    let lines: Vec<Line> = rows
        .iter()
        .skip(model.list_scroll)
        .take(usize::from(inner.height))
        .map(|row| match row {
            Row::Heading { bucket, count } => match bucket {
                Some(bucket) => {
                    Line::styled(format!("{bucket} {count}"), bucket_style(model, bucket))
                }
                None => Line::styled(format!("NO ACTION {count}"), theme.heading()),
            },
            Row::Rule(rule) => Line::styled(
                format!(" ✖ {}", model.zone.rewrite_utc_stamps(&inert(rule))),
                theme.alarm(),
            ),
            Row::Note(note) => Line::styled(format!(" ⚠ {}", inert(note)), theme.warning()),
            Row::Job { host, job } => job_line(
                model,
                &model.hosts[*host].name,
                job,
                host_width,
                id_width,
                width,
            ),
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

fn job_line(
    model: &FleetModel,
    host: &str,
    job: &Value,
    host_width: usize,
    id_width: usize,
    width: usize,
) -> Line<'static> {
    let theme = &model.theme;
    let id = text(job, "id");
    let state = State::parse(&text(job, "state"));
    let state_style = state.map_or_else(|| theme.warning(), |s| theme.state(s));
    let selected = model
        .selected
        .as_ref()
        .is_some_and(|(h, j)| h == host && *j == id);
    let approval = if job
        .get("approvals")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        "⚑"
    } else {
        " "
    };
    let progress = match (
        job.get("done").and_then(Value::as_u64),
        job.get("expected_total").and_then(Value::as_u64),
        // A host's number is shown within what it can mean: a percent beyond 0..=100 is not one.
        job.get("percent")
            .and_then(Value::as_f64)
            .map(|p| p.clamp(0.0, 100.0)),
    ) {
        (Some(done), Some(total), _) if total > 0 => {
            format!(
                "{done}/{total} {}%",
                (done.saturating_mul(100) / total).min(100)
            )
        }
        (_, None, Some(percent)) => format!("{percent:.0}%"),
        (Some(done), _, _) => done.to_string(),
        _ => "-".to_string(),
    };
    let age = job
        .get("progress_age_sec")
        .and_then(Value::as_f64)
        .map_or("-".to_string(), fmt_age);
    let mut spans = vec![
        Span::styled(format!(" {} ", state.map_or("?", symbol)), state_style),
        Span::styled(pad(&inert(host), host_width), theme.dim()),
        Span::raw(" "),
        Span::raw(pad(&id, id_width)),
        Span::styled(approval, theme.alarm()),
        Span::raw(" "),
        Span::styled(pad(&text(job, "state"), 17), state_style),
        Span::raw(" "),
        Span::raw(pad(&text(job, "liveness"), 7)),
        Span::raw(" "),
        Span::raw(pad(&progress, 15)),
        Span::raw(" "),
        Span::raw(pad(&age, 5)),
    ];
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    if let Some(first) = job
        .get("reasons")
        .and_then(Value::as_array)
        .and_then(|r| r.first())
        .and_then(Value::as_str)
        && used + 3 < width
    {
        spans.push(Span::styled(
            format!(" {}", pad(&inert(first), width - used - 1)),
            theme.dim(),
        ));
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

fn detail_pane(model: &FleetModel, frame: &mut Frame, area: Rect) {
    let theme = &model.theme;
    let Some((host, job)) = model.selected_job() else {
        return;
    };
    let host = &model.hosts[host].name;
    let title = format!(" {} on {} ", text(&job, "id"), inert(host));
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(theme.dim())
        .title(Span::styled(title, theme.heading()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = usize::from(inner.width).max(10);
    let mut lines: Vec<Line> = Vec::new();
    let mut field = |label: &str, value: String| {
        for piece in wrap(&format!("{label:<9} {value}"), width - 1) {
            lines.push(Line::raw(format!(
                " {}",
                model.zone.rewrite_utc_stamps(&piece)
            )));
        }
    };
    field(
        "state",
        format!("{} · {}", text(&job, "state"), text(&job, "liveness")),
    );
    if let Some(pid) = job.get("pid").and_then(Value::as_u64) {
        field("pid", pid.to_string());
    }
    if let Some(phase) = job.get("phase").and_then(Value::as_str) {
        field("phase", inert(phase));
    }
    for reason in job
        .get("reasons")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        field("why", inert(reason));
    }
    for approval in job
        .get("approvals")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        field(
            "approval",
            format!("{}: {}", text(approval, "step"), text(approval, "summary")),
        );
    }
    lines.push(Line::styled(" log (from the host)", theme.heading()));
    let tail_room = usize::from(inner.height).saturating_sub(lines.len());
    match &model.tail {
        None => lines.push(Line::styled(" asking the host…", theme.dim())),
        Some(tail) => match &tail.lines {
            Ok(tail_lines) if tail_lines.is_empty() => {
                lines.push(Line::styled(" (no lines)", theme.dim()));
            }
            Ok(tail_lines) => {
                let skip = tail_lines.len().saturating_sub(tail_room);
                for line in &tail_lines[skip..] {
                    lines.push(Line::raw(format!(" {}", pad(&inert(line), width - 1))));
                }
            }
            Err(why) => lines.push(Line::styled(format!(" {}", inert(why)), theme.warning())),
        },
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

fn events_view(model: &FleetModel, frame: &mut Frame, area: Rect) {
    let Some(events) = &model.events else { return };
    let theme = &model.theme;
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.focused_border())
        .title(Span::styled(
            format!(
                " events of {} on {} (from its own log) · Esc closes ",
                inert(&events.job),
                inert(&events.host)
            ),
            theme.heading(),
        ));
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    let width = usize::from(inner.width);
    let lines: Vec<Line> = match &events.lines {
        Ok(rows) if rows.is_empty() => vec![Line::styled(" asking the host…", theme.dim())],
        Ok(rows) => {
            let skip = rows.len().saturating_sub(usize::from(inner.height));
            rows[skip..]
                .iter()
                .map(|row| Line::raw(format!(" {}", pad(&inert(row), width.saturating_sub(1)))))
                .collect()
        }
        Err(why) => vec![Line::styled(format!(" {}", inert(why)), theme.warning())],
    };
    frame.render_widget(Paragraph::new(lines), inner);
}

fn status_line(model: &FleetModel, frame: &mut Frame, area: Rect) {
    let theme = &model.theme;
    let line = match &model.status {
        Some(status) => Line::styled(
            format!(" {}", model.zone.rewrite_utc_stamps(&inert(status))),
            theme.warning(),
        ),
        None => Line::styled(
            " q quit  ? help  ↑↓ move  ⏎ detail+log  e events  r restart  x release  M marker  a approve  p pause  K ack",
            theme.dim(),
        ),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// Every key of the fleet screen, as `?` shows it.
pub const KEYS: [(&str, &str); 11] = [
    ("↑ ↓  j k", "move the selection"),
    ("PgUp PgDn g G", "a page, the first, the last"),
    (
        "Enter  l",
        "the detail and the log tail, asked of the job's host",
    ),
    ("Esc", "close the detail"),
    ("e", "the job's events, from its host's own log"),
    (
        "r  x  M",
        "restart, release a dead lock, release a stale marker (several: choose which first)",
    ),
    (
        "a",
        "approve or deny a pending approval (several: choose which first)",
    ),
    ("p  K", "pause or resume, acknowledge broken rules"),
    (
        "",
        "each in the dialog, then by the host's own mihari ... --yes",
    ),
    ("?", "this help (any key closes it)"),
    ("q  Ctrl-C", "quit (the hosts' jobs and watchers go on)"),
];

fn help(model: &FleetModel, frame: &mut Frame, size: Rect) {
    crate::tui::view::help_box(frame, size, &model.theme, " fleet keys ", &KEYS, 80);
}

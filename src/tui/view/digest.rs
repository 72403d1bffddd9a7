//! The two views that take the body: the event log (`e`) and the daily digest (`D`), times in
//! the header's zone.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::text::{pad, wrap};
use crate::core::text::inert;
use crate::tui::model::Model;

pub(super) fn events_view(model: &Model, frame: &mut Frame, area: Rect) {
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
    let since_words = |since: chrono::DateTime<chrono::Utc>, tail: &str| {
        Line::styled(
            format!(
                " ── since you last looked, {}{tail} ──",
                model.zone.format(since, "%m-%d %H:%M:%S")
            ),
            theme.heading(),
        )
    };
    if rows.is_empty() {
        let mut lines = vec![Line::styled(" no events yet", theme.dim())];
        if let Some(since) = view.since {
            lines.push(since_words(since, ": nothing recorded"));
        }
        frame.render_widget(Paragraph::new(lines), inner);
        return;
    }
    let height = usize::from(inner.height);
    let end = rows
        .len()
        .saturating_sub(view.scroll.min(rows.len().saturating_sub(1)));
    let start = end.saturating_sub(height);
    let first_new = view
        .since
        .and_then(|since| rows.iter().position(|e| e.at > since));
    let mut lines: Vec<Line> = Vec::new();
    for (at, event) in rows.iter().enumerate().take(end).skip(start) {
        if Some(at) == first_new
            && let Some(since) = view.since
        {
            lines.push(Line::styled(
                pad(
                    &format!(
                        " ── since you last looked, {} ──",
                        model.zone.format(since, "%m-%d %H:%M:%S")
                    ),
                    usize::from(inner.width),
                ),
                theme.heading(),
            ));
        }
        lines.push({
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
        });
    }
    if first_new.is_none()
        && end == rows.len()
        && let Some(since) = view.since
    {
        lines.push(since_words(since, ": nothing recorded"));
    }
    let skip = lines.len().saturating_sub(height);
    frame.render_widget(Paragraph::new(lines.split_off(skip)), inner);
}

/// A digest report's lines in the header's zone.
pub(super) fn digest_lines(
    model: &Model,
    report: &crate::core::digest::DigestReport,
) -> Vec<String> {
    match model.zone {
        crate::probe::zone::Zone::Utc => report.lines(&chrono::Utc),
        crate::probe::zone::Zone::Local => report.lines(&chrono::Local),
    }
}

/// The daily digest: the newest one not yet marked read, grouped by job, then the queue since
/// the last cut. Times in the header's zone, like the rest of the screen.
pub(super) fn digest_view(model: &Model, frame: &mut Frame, area: Rect) {
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
            decided(
                model,
                view.happened.get(&Some(digest.id)),
                width,
                &mut lines,
            );
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
    decided(model, view.happened.get(&None), width, &mut lines);
    // The digests before: kept, newest first, each with its day's decisions.
    let mut earlier: Vec<&crate::core::digest::Digest> = view.previous.iter().collect();
    earlier.sort_by_key(|d| std::cmp::Reverse(d.cut));
    for (at, digest) in earlier.iter().enumerate().take(14) {
        lines.push(Line::raw(""));
        let read = digest.delivered.map_or("not read".to_string(), |when| {
            format!("read {}", model.zone.format(when, "%m-%d %H:%M"))
        });
        lines.push(Line::styled(
            format!(
                " earlier digest {} cut {} · {} items · {read}",
                digest.id,
                model.zone.format(digest.cut, "%Y-%m-%d %H:%M"),
                digest.items.len()
            ),
            theme.heading(),
        ));
        let before: Vec<crate::core::digest::Digest> =
            earlier.iter().skip(at + 1).map(|d| (*d).clone()).collect();
        let report = crate::core::digest::report(&digest.items, &before);
        for line in digest_lines(model, &report) {
            for piece in wrap(&format!(" {line}"), width.saturating_sub(1).max(10)) {
                lines.push(Line::raw(piece));
            }
        }
        decided(
            model,
            view.happened.get(&Some(digest.id)),
            width,
            &mut lines,
        );
    }
    let shown: Vec<Line> = lines
        .into_iter()
        .skip(view.scroll)
        .take(usize::from(inner.height))
        .collect();
    frame.render_widget(Paragraph::new(shown), inner);
}

/// A day's decisions and escalations, as the event log has them, under its digest.
fn decided(
    model: &Model,
    events: Option<&Vec<crate::engine::Event>>,
    width: usize,
    lines: &mut Vec<Line<'static>>,
) {
    let theme = &model.theme;
    let events = events.map(Vec::as_slice).unwrap_or_default();
    lines.push(Line::styled(
        format!("   decisions and escalations that day: {}", events.len()),
        theme.heading(),
    ));
    for event in events {
        let text = format!(
            "     {} {} {} by {}{}",
            model.zone.format(event.at, "%m-%d %H:%M"),
            event.kind,
            event
                .job
                .as_deref()
                .map(inert)
                .unwrap_or_else(|| "-".into()),
            event.actor.as_str(),
            event
                .reason
                .as_deref()
                .map(|r| format!(": {}", model.zone.rewrite_utc_stamps(&inert(r))))
                .unwrap_or_default()
        );
        let style = if event.kind == "escalated" {
            theme.alarm()
        } else {
            Style::default()
        };
        for piece in wrap(&text, width.saturating_sub(1).max(10)) {
            lines.push(Line::styled(piece, style));
        }
    }
}

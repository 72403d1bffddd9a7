//! The screen's two edges: the header (the watcher, the counts per bucket, the clock and its
//! zone, then dispatch-held, a banner or a notice) and the status line at the bottom (key
//! hints, the filter being typed, or a message). Drawn from the model alone.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::core::text::inert;
use crate::tui::model::Model;

pub(super) fn header(model: &Model, frame: &mut Frame, area: Rect) {
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

pub(super) fn status_line(model: &Model, frame: &mut Frame, area: Rect) {
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

//! The screen's two edges: the header (the watcher, the counts per bucket, the clock and its
//! zone, then dispatch-held, a banner or a notice) and the status line at the bottom (key
//! hints, the filter being typed, or a message). Drawn from the model alone.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::text::{pad, wrap};
use crate::core::text::inert;
use crate::tui::model::Model;

/// How many lines a wrapped banner or notice under the header's first line may take.
const SECOND_AT_MOST: usize = 3;
/// How many lines a wrapped status message may take.
const STATUS_AT_MOST: usize = 4;

/// The header's first line at `width`: it is shortened in steps until it fits, and the counts
/// per bucket are the last thing it gives up (the job count, then the zone's long name, then
/// the watcher's words, then the brand, then the bucket names are abbreviated).
fn first_line(model: &Model, width: usize) -> Line<'static> {
    let mut last = Line::raw("");
    for step in 0..=6 {
        let (mut spans, clock) = first_line_at(model, step);
        let used: usize = spans.iter().map(|s| s.width()).sum();
        let clock_width = clock.as_ref().map_or(0, |c| c.chars().count() + 3);
        if used + clock_width <= width {
            // The clock at the right edge.
            if let Some(clock) = clock {
                spans.push(Span::raw(" ".repeat(width - used - clock_width + 2)));
                spans.push(Span::raw(clock));
                spans.push(Span::raw(" "));
            }
            return Line::from(spans);
        }
        last = Line::from(spans);
    }
    last
}

/// The first line's spans at shortening `step`, and the clock that goes at its right end.
fn first_line_at(model: &Model, step: u8) -> (Vec<Span<'static>>, Option<String>) {
    let theme = &model.theme;
    let mut spans: Vec<Span<'static>> = Vec::new();
    if step < 4 {
        spans.push(Span::styled(" mihari ", theme.heading()));
        spans.push(Span::raw("│ "));
    } else {
        spans.push(Span::raw(" "));
    }
    let short = step >= 3;
    match model.snapshot.as_ref().map(|s| &s.watcher) {
        Some(watcher) => {
            let words = if short {
                watcher.short_words().to_string()
            } else {
                watcher.words_in(model.zone)
            };
            let style = if watcher.is_missing() {
                theme.alarm()
            } else if matches!(
                watcher,
                crate::engine::WatcherStatus::Alive { .. }
                    | crate::engine::WatcherStatus::Passes { .. }
            ) {
                theme.good()
            } else {
                theme.warning()
            };
            spans.push(Span::styled(words, style));
        }
        None => spans.push(Span::raw("watcher ?")),
    }
    if let Some(snapshot) = &model.snapshot {
        if snapshot.store_fault.is_some() {
            spans.push(Span::styled(" ✖ STORE FAULT", theme.alarm()));
        } else if snapshot.store_writes_failing.is_some() {
            spans.push(Span::styled(" ✖ STORE WRITES FAILING", theme.alarm()));
        }
        if snapshot.config_refused.is_some() {
            // The whole refusal is on the line below; here, that there is one.
            spans.push(Span::styled(" ✖ JOBS FILE REFUSED", theme.alarm()));
        }
    }
    spans.push(Span::raw(" │"));
    if let Some(snapshot) = &model.snapshot {
        let abbreviated = step >= 5;
        for (bucket, count) in snapshot.list.counts() {
            let style = if count > 0 {
                theme.bucket(bucket)
            } else {
                theme.dim()
            };
            let name = match (abbreviated, bucket) {
                (true, crate::core::Bucket::Restart) => "RST",
                (true, crate::core::Bucket::Dispatch) => "DSP",
                (true, crate::core::Bucket::Stale) => "STL",
                _ => bucket.as_str(),
            };
            spans.push(Span::raw(" "));
            spans.push(Span::styled(format!("{name} {count}"), style));
        }
        let approvals = snapshot.list.pending_approvals();
        if approvals > 0 {
            let name = if abbreviated { "APPR" } else { "APPROVALS" };
            spans.push(Span::styled(
                format!(" ⚑ {name} {approvals}"),
                theme.alarm(),
            ));
        }
        if snapshot.polled_folders > 0 {
            let name = if abbreviated { "POLL" } else { "POLLING" };
            spans.push(Span::styled(
                format!(" ⚠ {name} {}", snapshot.polled_folders),
                theme.warning(),
            ));
        }
        if step < 1 {
            let total = snapshot.list.actions.len() + snapshot.list.rest.len();
            spans.push(Span::styled(format!(" │ {total} jobs"), theme.dim()));
        }
    }
    // The zone is named here, once; every other time on the screen is in it.
    let clock = (step < 6).then(|| {
        let zone = model.zone.name(model.now);
        let hhmm = model.zone.format(model.now, "%H:%M");
        if step < 2 {
            format!("{hhmm} {zone}")
        } else {
            // Its abbreviation alone still names the zone ("21:30 JST").
            format!("{hhmm} {}", zone.split(" (").next().unwrap_or(&zone))
        }
    });
    (spans, clock)
}

/// The words under the first line: a banner (an escalation, until a key), the state store's
/// fault, the refused jobs file, dispatch held, or the first notice. Empty when there is none.
fn second_words(model: &Model) -> Option<(String, ratatui::style::Style)> {
    let theme = &model.theme;
    if let Some(banner) = &model.banner {
        return Some((format!(" ⚠ NOW: {}", inert(&banner.message)), theme.alarm()));
    }
    let Some(snapshot) = &model.snapshot else {
        return Some((" gathering evidence…".to_string(), theme.dim()));
    };
    if let Some(fault) = &snapshot.store_fault {
        return Some((format!(" ✖ state store: {}", inert(fault)), theme.alarm()));
    }
    if let Some(refused) = &snapshot.config_refused {
        return Some((format!(" ✖ {}", inert(refused)), theme.alarm()));
    }
    if let Some(why) = &snapshot.list.dispatch_held {
        return Some((
            format!(
                " ⚠ dispatch held: nothing new is dispatched while {}",
                inert(why)
            ),
            theme.alarm(),
        ));
    }
    snapshot
        .notices
        .first()
        .map(|notice| (format!(" {}", inert(notice)), theme.warning()))
}

/// The second part of the header wrapped to `width`: never cut silently (at most
/// [`SECOND_AT_MOST`] lines, the last saying where the rest is).
fn second_lines(model: &Model, width: usize) -> Vec<Line<'static>> {
    match second_words(model) {
        Some((words, style)) => fitted(
            &words,
            width,
            SECOND_AT_MOST,
            "the detail and `check` have the rest",
        )
        .into_iter()
        .map(|piece| Line::styled(piece, style))
        .collect(),
        None => vec![Line::raw("")],
    }
}

/// `text` wrapped to `width` in at most `most` lines; when it needs more, the last line ends
/// saying where the whole is (`whole`), so nothing is cut without a word.
fn fitted(text: &str, width: usize, most: usize, whole: &str) -> Vec<String> {
    let mut pieces = wrap(text, width.max(10));
    if pieces.len() > most {
        pieces.truncate(most);
        let note = format!(" … ({whole})");
        if let Some(last) = pieces.last_mut() {
            let keep = width.saturating_sub(note.chars().count());
            *last = format!("{}{note}", pad(last, keep).trim_end());
        }
    }
    pieces
}

/// How many lines the header takes at `width`: its first line and its wrapped second part.
pub fn header_height(model: &Model, width: u16) -> u16 {
    1 + second_lines(model, usize::from(width)).len() as u16
}

/// How many lines the status line takes at `width`: a message wraps.
pub fn status_height(model: &Model, width: u16) -> u16 {
    match status_message(model) {
        Some(text) if !model.filter_editing => fitted(
            &text,
            usize::from(width),
            STATUS_AT_MOST,
            "L shows it whole",
        )
        .len() as u16,
        _ => 1,
    }
}

fn status_message(model: &Model) -> Option<String> {
    model
        .status
        .as_ref()
        .map(|status| format!(" {}", model.zone.rewrite_utc_stamps(&inert(status))))
}

pub(super) fn header(model: &Model, frame: &mut Frame, area: Rect) {
    if area.height == 0 {
        return;
    }
    let width = usize::from(area.width);
    let mut lines = vec![first_line(model, width)];
    lines.extend(second_lines(model, width));
    frame.render_widget(Paragraph::new(lines), area);
}

pub(super) fn status_line(model: &Model, frame: &mut Frame, area: Rect) {
    if area.height == 0 {
        return;
    }
    let theme = &model.theme;
    let width = usize::from(area.width);
    let lines = if model.filter_editing {
        vec![Line::from(vec![
            Span::styled(" filter: ", theme.heading()),
            Span::raw(format!("{}▏", inert(&model.filter))),
            Span::styled("  Enter keeps · Esc clears", theme.dim()),
        ])]
    } else if let Some(status) = status_message(model) {
        fitted(&status, width, STATUS_AT_MOST, "L shows it whole")
            .into_iter()
            .map(|piece| Line::styled(piece, theme.warning()))
            .collect()
    } else {
        // Quit and help first: a narrow screen cuts whole hints from the right.
        let mut hints = vec![
            "q quit",
            "? help",
            "↑↓ move",
            "⏎ detail",
            "r restart",
            "x release",
            "a approve",
            "l log",
            "e events",
            "/ filter",
            "p pause",
            "K ack",
        ];
        if !model.filter.is_empty() {
            hints.insert(2, "Esc clears the filter");
        }
        let mut text = String::new();
        for hint in hints {
            if text.chars().count() + hint.chars().count() + 2 > width {
                break;
            }
            text.push_str(if text.is_empty() { " " } else { "  " });
            text.push_str(hint);
        }
        vec![Line::styled(text, theme.dim())]
    };
    frame.render_widget(Paragraph::new(lines), area);
}

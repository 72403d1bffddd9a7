//! What is drawn over the screen: the help with every key, the confirmation dialog and the
//! chooser (drawn by the code both screens share), and the box they all sit in.

use ratatui::Frame;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::text::pad;
use crate::tui::model::Model;
use crate::tui::theme::Theme;

/// Every key, as `?` shows it.
pub const KEYS: [(&str, &str); 20] = [
    ("↑ ↓  j k", "move the selection, or scroll the detail"),
    ("PgUp PgDn g G", "a page up or down; the first or the last"),
    ("Enter", "open or close the detail of the selected job"),
    ("Tab", "switch between the list and the detail"),
    ("l", "the log: / n N search, o opens it in $PAGER"),
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
    ("a", "approve or deny the selected approval (or choose one)"),
    ("p  K", "pause or resume (p), acknowledge broken rules (K)"),
    ("e", "the event log, from what happened since you looked"),
    ("D", "the daily digests (m marks the newest read)"),
    ("L", "the last message whole"),
    ("mouse", "wheel scrolls, click selects"),
    ("?", "this help; Tab: the marks (any other key closes)"),
    ("q  Ctrl-C", "quit (the jobs keep running)"),
    ("NO_COLOR", "set it for marks without colour"),
];

/// The help over the screen: its keys, or (Tab) the legend of every mark.
pub(super) fn help(model: &Model, frame: &mut Frame, size: Rect) {
    if model.help_legend {
        help_box(
            frame,
            size,
            &model.theme,
            " marks (Tab: the keys) ",
            &crate::tui::theme::LEGEND,
            76,
        );
    } else {
        help_box(
            frame,
            size,
            &model.theme,
            " keys (Tab: the marks) ",
            &KEYS,
            76,
        );
    }
}

/// The last status message whole, over the screen (`L`).
pub(super) fn last_message(model: &Model, frame: &mut Frame, size: Rect) {
    let width = size.width.min(96);
    let inner = usize::from(width.saturating_sub(4)).max(10);
    let text = model
        .last_status
        .as_deref()
        .map(|status| {
            model
                .zone
                .rewrite_utc_stamps(&crate::core::text::inert(status))
        })
        .unwrap_or_else(|| "no message yet".to_string());
    let mut lines = vec![Line::raw("")];
    for piece in super::text::wrap(&text, inner) {
        lines.push(Line::raw(format!(" {piece}")));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(" any key closes", model.theme.dim()));
    let area = centered(size, width, lines.len() as u16 + 2);
    overlay(
        frame,
        area,
        lines,
        " the last message ",
        model.theme.focused_border(),
        &model.theme,
    );
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
pub(super) fn dialog_view(
    model: &Model,
    dialog: &crate::tui::model::Dialog,
    frame: &mut Frame,
    size: Rect,
) {
    crate::tui::dialog::draw(&model.theme, model.zone, model.now, dialog, frame, size);
}

/// A chooser, drawn by the one chooser code both screens use.
pub(super) fn chooser_view(
    model: &Model,
    chooser: &crate::tui::model::Chooser,
    frame: &mut Frame,
    size: Rect,
) {
    crate::tui::chooser::draw(
        &model.theme,
        model.zone,
        model.now,
        chooser,
        "",
        frame,
        size,
    );
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

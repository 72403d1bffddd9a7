//! The log tail of the selected job: one terminal line per log line (its last
//! carriage-return frame), newest last, the rotated predecessor's lines first when the log
//! holds fewer than asked, and what an empty, missing or faulty log is; and the log view
//! (`l`), the log over the whole body with its path, still while scrolled up, its search
//! matches marked.

use ratatui::style::Style;
use ratatui::text::Line;

use super::text::{pad, wrap};
use crate::core::text::inert;
use crate::core::{Carried, Reading};
use crate::tui::model::Model;

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

/// The log view (`l`): the log's path in the title, one terminal line per log line (cut,
/// never wrapped), the search match reversed and other matches bold, what arrived while
/// scrolled up announced, and the keys at the bottom.
pub(super) fn log_view(model: &Model, frame: &mut ratatui::Frame, area: ratatui::layout::Rect) {
    use ratatui::text::Span;
    use ratatui::widgets::{Block, Borders, Clear, Paragraph};
    let Some(view) = &model.log else {
        return;
    };
    let theme = &model.theme;
    let width = usize::from(area.width);
    let mut title = format!(
        " log of {}: '{}' ",
        inert(&view.job),
        inert(&view.path.display().to_string())
    );
    if view.scroll > 0 {
        title.push_str(&format!("· scrolled up {} lines ", view.scroll));
    }
    let mut block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(theme.focused_border())
        .title(Span::styled(
            pad(&title, width).trim_end().to_string(),
            theme.heading(),
        ));
    let keys = match (&view.typing, &view.newer) {
        (Some(typing), _) => format!(" /{}▏ Enter searches older lines · Esc ", inert(typing)),
        (None, Some(_)) => {
            " new lines below: G shows them · / n N search · o $PAGER · Esc back ".to_string()
        }
        (None, None) => {
            " ↑↓ PgUp PgDn g G · / search · n older N newer · o $PAGER · Esc back ".to_string()
        }
    };
    block = block.title_bottom(Span::styled(
        pad(&keys, width).trim_end().to_string(),
        if view.typing.is_some() || view.newer.is_some() {
            theme.warning()
        } else {
            theme.dim()
        },
    ));
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    let height = usize::from(inner.height);
    let mut lines: Vec<Line> = Vec::new();
    if let Some(trouble) = &view.trouble
        && view.lines.is_empty()
    {
        let style = if trouble.starts_with("fault") {
            theme.alarm()
        } else {
            theme.dim()
        };
        lines.push(Line::styled(format!("  {}", inert(trouble)), style));
        frame.render_widget(Paragraph::new(lines), inner);
        return;
    }
    let end = view.lines.len().saturating_sub(view.scroll);
    let start = end.saturating_sub(height);
    for at in start..end {
        if let Some((_, path)) = &view.earlier
            && at == 0
        {
            lines.push(Line::styled(
                format!(
                    "  ── earlier lines, in '{}' (rotated) ──",
                    inert(&path.display().to_string())
                ),
                theme.dim(),
            ));
        }
        if let Some((split, _)) = &view.earlier
            && at == *split
        {
            lines.push(Line::styled(
                "  ── since the rotation ──".to_string(),
                theme.dim(),
            ));
        }
        let line = &view.lines[at];
        let text = pad(&format!(" {}", inert(line)), width)
            .trim_end()
            .to_string();
        let style = if view.hit == Some(at) {
            theme.selected()
        } else if view.matches(line) {
            theme.heading()
        } else {
            Style::default()
        };
        lines.push(Line::styled(text, style));
    }
    // The dividers may push the first lines out: the newest stay in view.
    let skip = lines.len().saturating_sub(height);
    frame.render_widget(Paragraph::new(lines.split_off(skip)), inner);
}

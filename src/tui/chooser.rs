//! The chooser, as a value: when a job has several pending approvals (`a`) or several stale
//! markers (`M`), the operator picks the one to decide before any dialog opens. It never
//! decides anything: a pick is handed back to whoever opened it, which opens the same
//! confirmation dialog as a single one would (the dashboard proposes a [`Decision`] here; the
//! fleet screen a host's own `mihari ... --yes` over ssh). Both screens use this one chooser:
//! its keys and its box are the same on either.
//!
//! [`Decision`]: crate::core::decision::Decision

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use crossterm::event::{KeyCode, KeyEvent};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Line;

use super::theme::Theme;
use crate::core::PendingApproval;
use crate::core::text::inert;
use crate::probe::zone::Zone;

/// The chooser of the approve key (a job with several pending approvals) and of the marker
/// (a job with several stale markers): which one to decide. Choosing one opens the same
/// confirmation dialog as a single one does; nothing is decided here, so closing it records
/// nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Chooser {
    pub job: String,
    /// What there is to choose among, as it was when the key was pressed.
    pub choices: Choices,
    /// The highlighted one.
    pub at: usize,
}

/// What a [`Chooser`] offers.
#[derive(Debug, Clone, PartialEq)]
pub enum Choices {
    /// The job's pending approvals, oldest first.
    Approvals(Vec<PendingApproval>),
    /// The job's stale markers, in its `markers:` order: each path and its judgment in
    /// words (its age, why it is stale).
    Markers(Vec<(PathBuf, String)>),
}

impl Chooser {
    /// How many there are to choose among.
    pub fn len(&self) -> usize {
        match &self.choices {
            Choices::Approvals(approvals) => approvals.len(),
            Choices::Markers(markers) => markers.len(),
        }
    }

    /// Whether there is nothing to choose.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a key did to an open chooser.
#[derive(Debug, Clone, PartialEq)]
pub enum Picked {
    /// Still open (moved, or a key it ignores).
    Open,
    /// Closed with Esc: nothing chosen, nothing decided.
    Closed,
    /// `q`: the screen quits.
    Quit,
    /// The pending approval with this key of `job`.
    Approval { job: String, key: String },
    /// The stale marker at this path of `job`.
    Marker { job: String, path: PathBuf },
}

/// Keys while a chooser is open: arrows (or j/k, Tab) move, Enter takes the highlighted one,
/// a digit takes that one at once, Esc closes it having decided nothing, `q` quits.
pub fn on_key(chooser: &mut Option<Chooser>, status: &mut Option<String>, key: KeyEvent) -> Picked {
    let Some(open) = chooser.as_mut() else {
        return Picked::Closed;
    };
    let count = open.len();
    let (what, whats) = match open.choices {
        Choices::Approvals(_) => ("approval", "pending approvals"),
        Choices::Markers(_) => ("marker", "stale markers"),
    };
    let take = |chooser: &mut Option<Chooser>, at: usize| {
        let Some(taken) = chooser.take() else {
            return Picked::Closed;
        };
        let job = taken.job;
        match taken.choices {
            Choices::Approvals(approvals) => match approvals.get(at) {
                Some(approval) => Picked::Approval {
                    job,
                    key: approval.key.clone(),
                },
                None => Picked::Closed,
            },
            Choices::Markers(markers) => match markers.get(at) {
                Some((path, _)) => Picked::Marker {
                    job,
                    path: path.clone(),
                },
                None => Picked::Closed,
            },
        }
    };
    match key.code {
        KeyCode::Esc => {
            *chooser = None;
            *status = Some(format!("no {what} chosen: nothing was decided"));
            return Picked::Closed;
        }
        KeyCode::Char('q') => return Picked::Quit,
        KeyCode::Up | KeyCode::Char('k') | KeyCode::BackTab => open.at = open.at.saturating_sub(1),
        KeyCode::Down | KeyCode::Char('j') | KeyCode::Tab => {
            open.at = (open.at + 1).min(count.saturating_sub(1))
        }
        KeyCode::Home | KeyCode::Char('g') => open.at = 0,
        KeyCode::End | KeyCode::Char('G') => open.at = count.saturating_sub(1),
        KeyCode::Enter => {
            let at = open.at;
            return take(chooser, at);
        }
        KeyCode::Char(c @ '1'..='9') => {
            let at = usize::from(c as u8 - b'1');
            if at < count {
                return take(chooser, at);
            }
            *status = Some(format!(
                "there are {count} {whats}: press 1 to {}",
                count.min(9)
            ));
        }
        _ => {}
    }
    Picked::Open
}

/// A pending approval in one line: its step, summary, who asked and when, and its key.
pub fn approval_words(zone: Zone, now: DateTime<Utc>, approval: &PendingApproval) -> String {
    let by = approval
        .requested_by
        .as_deref()
        .map(|by| format!(" by {}", inert(by)))
        .unwrap_or_default();
    // The time of day when it is today in the header's zone, else with the date.
    let at = if zone.format(approval.requested, "%Y-%m-%d") == zone.format(now, "%Y-%m-%d") {
        zone.format(approval.requested, "%H:%M:%S")
    } else {
        zone.format(approval.requested, "%Y-%m-%d %H:%M")
    };
    format!(
        "step '{}': {} · asked{by} at {at} ({} ago) · key {}",
        inert(&approval.step),
        inert(&approval.summary),
        super::view::fmt_age((now - approval.requested).num_milliseconds() as f64 / 1000.0),
        inert(&approval.key)
    )
}

/// The chooser's box: a job's pending approvals (numbered oldest first) or its stale markers
/// (in its `markers:` order), the highlighted one marked; `place` names where the job is (the
/// fleet screen's host), or is empty.
pub fn draw(
    theme: &Theme,
    zone: Zone,
    now: DateTime<Utc>,
    chooser: &Chooser,
    place: &str,
    frame: &mut Frame,
    size: Rect,
) {
    let width = size.width.saturating_sub(4).clamp(20.min(size.width), 96);
    let inner_width = usize::from(width.saturating_sub(2));
    let job = if place.is_empty() {
        format!("'{}'", inert(&chooser.job))
    } else {
        format!("'{}' on '{}'", inert(&chooser.job), inert(place))
    };
    let (intro, choices, title) = match &chooser.choices {
        Choices::Approvals(approvals) => (
            format!(
                " {} approvals wait for a human; choose the one to decide:",
                approvals.len()
            ),
            approvals
                .iter()
                .map(|approval| approval_words(zone, now, approval))
                .collect::<Vec<_>>(),
            format!(" approve or deny: which request of {job}? "),
        ),
        Choices::Markers(markers) => (
            format!(
                " {} markers are stale; choose the one to look at and release:",
                markers.len()
            ),
            markers.iter().map(|(_, words)| inert(words)).collect(),
            format!(" release: which marker of {job}? "),
        ),
    };
    let mut lines: Vec<Line> = vec![Line::raw(intro)];
    lines.push(Line::raw(""));
    for (n, words) in choices.iter().enumerate() {
        let chosen = n == chooser.at;
        let mark = if chosen { "›" } else { " " };
        let text = format!("{mark} {} {words}", n + 1);
        let style = if chosen {
            theme.selected()
        } else {
            Style::default()
        };
        for piece in super::view::wrap(&text, inner_width.saturating_sub(1)) {
            lines.push(Line::styled(format!(" {piece}"), style));
        }
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!(
            " ↑↓ moves · 1-{} or Enter chooses · Esc closes (nothing decided)",
            chooser.len().min(9)
        ),
        theme.dim(),
    ));
    let area = super::view::centered(size, width, lines.len() as u16 + 2);
    super::view::overlay(frame, area, lines, &title, theme.alarm(), theme);
}

//! The confirmation dialog, as a value: a proposal waiting for the operator's answer, the keys
//! that answer it, and how it is drawn. It never performs anything: an answer is handed back
//! to whoever opened it (the dashboard carries out a [`Decision`] here; the fleet screen
//! sends a host's own `mihari ... --yes` over ssh). Both screens use this one dialog, so an
//! approval is never a single key press and a pause never lacks a reason, on either.

use chrono::{DateTime, Utc};
use crossterm::event::{KeyCode, KeyEvent};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::theme::Theme;
use crate::core::decision::Decision;
use crate::core::text::inert;
use crate::probe::zone::Zone;

/// What a dialog can confirm: what it says, and how the operator's answer changes it.
pub trait Proposal: Clone + std::fmt::Debug + PartialEq {
    /// `restart`, `release`, `approve`, ...
    fn verb(&self) -> &str;
    /// The job it acts on (an approval asks the operator to type it).
    fn job(&self) -> &str;
    /// What will happen, as label and value lines.
    fn describe(&self, now: DateTime<Utc>) -> Vec<(String, String)>;
    /// Why confirming now would do nothing, when it would (a closed cooldown): the dialog says
    /// so and offers no confirm button.
    fn wont_happen(&self, _now: DateTime<Utc>) -> Option<String> {
        None
    }
    /// Whether the operator must write a reason (pause, acknowledge).
    fn needs_reason(&self) -> bool;
    /// Whether this is an approval, with Deny beside Approve and the job id to type.
    fn is_approval(&self) -> bool;
    /// The proposal as answered: denied (with the reason, or a default) or approved, a pause
    /// or an acknowledgement with the reason written.
    fn answered(self, deny: bool, reason: &str) -> Self;
}

impl Proposal for Decision {
    fn verb(&self) -> &str {
        Decision::verb(self)
    }

    fn job(&self) -> &str {
        Decision::job(self)
    }

    fn describe(&self, now: DateTime<Utc>) -> Vec<(String, String)> {
        Decision::describe(self, now)
    }

    fn wont_happen(&self, now: DateTime<Utc>) -> Option<String> {
        Decision::wont_happen(self, now)
    }

    fn needs_reason(&self) -> bool {
        Decision::needs_reason(self)
    }

    fn is_approval(&self) -> bool {
        matches!(self, Decision::Approve(_) | Decision::Deny(_))
    }

    fn answered(self, deny: bool, reason: &str) -> Self {
        match self {
            Decision::Approve(mut plan) | Decision::Deny(mut plan) if deny => {
                plan.reason = Some(if reason.trim().is_empty() {
                    "denied from the dashboard".to_string()
                } else {
                    reason.trim().to_string()
                });
                Decision::Deny(plan)
            }
            Decision::Approve(mut plan) | Decision::Deny(mut plan) => {
                plan.reason = None;
                Decision::Approve(plan)
            }
            Decision::Pause(mut plan) => {
                plan.reason = reason.trim().to_string();
                Decision::Pause(plan)
            }
            Decision::Acknowledge(mut plan) => {
                plan.reason = reason.trim().to_string();
                Decision::Acknowledge(plan)
            }
            decision => decision,
        }
    }
}

/// What a key did to an open dialog.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<P> {
    /// Still open (or none was open).
    Open,
    /// Cancelled: record that the operator declined, if the opener records such things.
    Decline(P),
    /// Confirmed: carry it out.
    Execute(P),
}

/// A button of a confirmation dialog. Cancel is where the focus starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// The job id the operator must type to approve or deny.
    TypedId,
    /// The reason of a denial, a pause or an acknowledgement.
    Reason,
    Cancel,
    /// Deny (approval dialogs only).
    Deny,
    /// Restart, release, approve, pause, resume or acknowledge.
    Confirm,
}

/// A confirmation dialog: a proposed decision waiting for the operator's answer. It holds
/// the decision as a value and answers only with a command; it performs nothing itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Dialog<P = Decision> {
    pub decision: P,
    pub focus: Focus,
    /// What the operator typed as the job id (approvals).
    pub typed: String,
    /// What the operator typed as the reason for a denial, a pause or an acknowledgement.
    pub reason: String,
    /// What the last key could not do, said inside the dialog beside the field it concerns
    /// ("type the job id 'publish' first").
    pub missing: Option<String>,
    /// Set when confirming would do nothing (see [`Proposal::wont_happen`]): no confirm
    /// button is offered, and the focus never reaches one.
    pub inert: Option<String>,
}

impl<P: Proposal> Dialog<P> {
    /// Cancel has the focus, except in an approval, which starts in the job-id field, and in
    /// a pause or an acknowledgement, which start in the reason field: typing there can never
    /// confirm anything.
    pub fn new(decision: P) -> Self {
        Self::at(decision, None)
    }

    /// A dialog for `decision` proposed at `now`: when confirming then would do nothing, it
    /// says why and has no confirm button.
    pub fn at(decision: P, now: Option<DateTime<Utc>>) -> Self {
        let inert = now.and_then(|now| decision.wont_happen(now));
        let focus = if decision.is_approval() {
            Focus::TypedId
        } else if decision.needs_reason() {
            Focus::Reason
        } else {
            Focus::Cancel
        };
        Dialog {
            decision,
            focus,
            typed: String::new(),
            reason: String::new(),
            missing: None,
            inert,
        }
    }

    /// Whether this is an approval, which asks for the typed job id.
    pub fn is_approval(&self) -> bool {
        self.decision.is_approval()
    }

    /// Whether the typed id lets Approve or Deny act.
    pub fn id_matches(&self) -> bool {
        self.typed == self.decision.job()
    }

    /// The focus order that Tab walks.
    fn order(&self) -> &'static [Focus] {
        if self.inert.is_some() {
            &[Focus::Cancel]
        } else if self.is_approval() {
            &[
                Focus::TypedId,
                Focus::Reason,
                Focus::Cancel,
                Focus::Deny,
                Focus::Confirm,
            ]
        } else if self.decision.needs_reason() {
            &[Focus::Reason, Focus::Cancel, Focus::Confirm]
        } else {
            &[Focus::Cancel, Focus::Confirm]
        }
    }

    fn move_focus(&mut self, forward: bool) {
        let order = self.order();
        let at = order.iter().position(|f| *f == self.focus).unwrap_or(0);
        let next = if forward {
            (at + 1) % order.len()
        } else {
            (at + order.len() - 1) % order.len()
        };
        self.focus = order[next];
    }
}

/// Keys while a dialog is open: it takes them all. Cancel has the focus at first; Enter on
/// a button answers; Esc cancels. Only Confirm (or Deny) produces the decision to execute.
/// What the operator must be told (type the id first, write a reason) goes to `status`.
pub fn on_key<P: Proposal>(
    slot: &mut Option<Dialog<P>>,
    status: &mut Option<String>,
    key: KeyEvent,
) -> Answer<P> {
    let Some(dialog) = slot.as_mut() else {
        return Answer::Open;
    };
    match key.code {
        KeyCode::Esc => {
            return slot
                .take()
                .map_or(Answer::Open, |d| Answer::Decline(d.decision));
        }
        KeyCode::Tab | KeyCode::Right => dialog.move_focus(true),
        KeyCode::BackTab | KeyCode::Left => dialog.move_focus(false),
        KeyCode::Backspace => match dialog.focus {
            Focus::TypedId => {
                dialog.typed.pop();
            }
            Focus::Reason => {
                dialog.reason.pop();
            }
            _ => {}
        },
        KeyCode::Char(c) if matches!(dialog.focus, Focus::TypedId | Focus::Reason) => {
            let field = if dialog.focus == Focus::TypedId {
                &mut dialog.typed
            } else {
                &mut dialog.reason
            };
            if !c.is_control() && field.chars().count() < 200 {
                field.push(c);
            }
            dialog.missing = None;
        }
        KeyCode::Enter => match dialog.focus {
            // A required field left empty (or wrong) keeps the focus and says what is missing.
            Focus::TypedId if dialog.typed.is_empty() => {
                dialog.missing = Some(format!(
                    "type the job id '{}' here first: approvals are never a single key press",
                    dialog.decision.job()
                ));
            }
            Focus::TypedId if !dialog.id_matches() => {
                dialog.missing = Some(format!(
                    "'{}' is not the job id: type '{}' exactly",
                    inert(&dialog.typed),
                    dialog.decision.job()
                ));
            }
            Focus::Reason
                if dialog.decision.needs_reason()
                    && crate::core::decision::checked_reason(&dialog.reason).is_none() =>
            {
                dialog.missing = Some(format!(
                    "write a reason here first: why you {} '{}', for whoever looks next",
                    dialog.decision.verb(),
                    dialog.decision.job()
                ));
            }
            Focus::TypedId | Focus::Reason => {
                dialog.missing = None;
                dialog.move_focus(true);
            }
            Focus::Cancel => {
                return slot
                    .take()
                    .map_or(Answer::Open, |d| Answer::Decline(d.decision));
            }
            Focus::Confirm | Focus::Deny => {
                if dialog.inert.is_some() {
                    return Answer::Open;
                }
                if dialog.is_approval() && !dialog.id_matches() {
                    let said = format!(
                        "type the job id '{}' first: approvals are never a single key press",
                        dialog.decision.job()
                    );
                    *status = Some(said.clone());
                    dialog.missing = Some(said);
                    dialog.focus = Focus::TypedId;
                    return Answer::Open;
                }
                if dialog.decision.needs_reason()
                    && crate::core::decision::checked_reason(&dialog.reason).is_none()
                {
                    let said = format!(
                        "write a reason first: why you {} '{}', for whoever looks next",
                        dialog.decision.verb(),
                        dialog.decision.job()
                    );
                    *status = Some(said.clone());
                    dialog.missing = Some(said);
                    dialog.focus = Focus::Reason;
                    return Answer::Open;
                }
                let Some(dialog) = slot.take() else {
                    return Answer::Open;
                };
                let deny = dialog.focus == Focus::Deny;
                let decision = dialog.decision.answered(deny, &dialog.reason);
                *status = Some(format!(
                    "{} '{}': carrying it out…",
                    decision.verb(),
                    decision.job()
                ));
                return Answer::Execute(decision);
            }
        },
        _ => {}
    }
    Answer::Open
}

/// The confirmation dialog: what will happen, then the buttons; Cancel is focused first.
pub fn draw<P: Proposal>(
    theme: &Theme,
    zone: Zone,
    now: DateTime<Utc>,
    dialog: &Dialog<P>,
    frame: &mut Frame,
    size: Rect,
) {
    let width = size.width.saturating_sub(4).clamp(20.min(size.width), 96);
    let inner_width = usize::from(width.saturating_sub(2));
    let mut lines: Vec<Line> = Vec::new();
    for (label, value) in dialog.decision.describe(now) {
        let text = format!("{label:<9} {}", zone.rewrite_utc_stamps(&inert(&value)));
        for piece in super::view::wrap(&text, inner_width.saturating_sub(1)) {
            lines.push(Line::raw(format!(" {piece}")));
        }
    }
    lines.push(Line::raw(""));
    // The focused field is drawn boxed, so the eye knows where typing goes; the others are
    // one line each.
    let field_width = inner_width.saturating_sub(2).max(10);
    let field = |label: &str, value: &str, focused: bool, lines: &mut Vec<Line<'static>>| {
        let shown = format!("{}▏", inert(value));
        if focused {
            let label = format!("┌ {label} ");
            let label_width = label.chars().count();
            lines.push(Line::styled(
                format!(
                    " {label}{}┐",
                    "─".repeat(field_width.saturating_sub(label_width + 1))
                ),
                theme.focused_border(),
            ));
            lines.push(Line::from(vec![
                Span::styled(" │ ", theme.focused_border()),
                Span::styled(
                    super::view::pad(&shown, field_width.saturating_sub(4)),
                    theme.selected(),
                ),
                Span::styled(" │", theme.focused_border()),
            ]));
            lines.push(Line::styled(
                format!(" └{}┘", "─".repeat(field_width.saturating_sub(2))),
                theme.focused_border(),
            ));
        } else {
            lines.push(Line::from(vec![
                Span::styled(format!("   {label}: "), theme.heading()),
                Span::raw(shown),
            ]));
        }
    };
    if dialog.is_approval() {
        field(
            &format!("type the job id '{}'", inert(dialog.decision.job())),
            &dialog.typed,
            dialog.focus == Focus::TypedId,
            &mut lines,
        );
        field(
            "reason, if you deny",
            &dialog.reason,
            dialog.focus == Focus::Reason,
            &mut lines,
        );
    } else if dialog.decision.needs_reason() {
        field(
            &format!("reason, why you {} it (required)", dialog.decision.verb()),
            &dialog.reason,
            dialog.focus == Focus::Reason,
            &mut lines,
        );
    }
    if let Some(missing) = &dialog.missing {
        for piece in super::view::wrap(&format!("⚠ {missing}"), inner_width.saturating_sub(1)) {
            lines.push(Line::styled(format!(" {piece}"), theme.alarm()));
        }
    }
    if let Some(why) = &dialog.inert {
        let why = zone.rewrite_utc_stamps(&inert(why));
        for piece in super::view::wrap(&format!("⚠ {why}"), inner_width.saturating_sub(1)) {
            lines.push(Line::styled(format!(" {piece}"), theme.warning()));
        }
    }
    if dialog.is_approval() || dialog.decision.needs_reason() || dialog.inert.is_some() {
        lines.push(Line::raw(""));
    }
    let button = |label: &str, focus: Focus| {
        let style = if dialog.focus == focus {
            theme
                .selected()
                .add_modifier(ratatui::style::Modifier::BOLD)
        } else {
            Style::default()
        };
        Span::styled(format!("[ {label} ]"), style)
    };
    let mut buttons = vec![Span::raw(" "), button("Cancel", Focus::Cancel)];
    if dialog.inert.is_some() {
        // Only what will happen is offered: nothing to confirm.
    } else if dialog.is_approval() {
        buttons.push(Span::raw("  "));
        buttons.push(button("Deny", Focus::Deny));
        buttons.push(Span::raw("  "));
        buttons.push(button("Approve", Focus::Confirm));
    } else {
        buttons.push(Span::raw("  "));
        let verb = match dialog.decision.verb() {
            "restart" => "Restart",
            "pause" => "Pause",
            "resume" => "Resume",
            "acknowledge" => "Acknowledge",
            _ => "Release",
        };
        buttons.push(button(verb, Focus::Confirm));
    }
    lines.push(Line::from(buttons));
    lines.push(Line::styled(
        " Tab moves · Enter answers · Esc cancels",
        theme.dim(),
    ));
    let area = super::view::centered(size, width, lines.len() as u16 + 2);
    let title = format!(
        " {} '{}'? ",
        dialog.decision.verb(),
        inert(dialog.decision.job())
    );
    super::view::overlay(frame, area, lines, &title, theme.alarm(), theme);
}

//! Colours and symbols. Every state has a text symbol as well as a colour, so the screen still
//! reads with `NO_COLOR` set or on a monochrome terminal; the theme is chosen once at start and
//! carried in the model, so `view` never looks at the environment.

use ratatui::style::{Color, Modifier, Style};

use crate::core::{Bucket, State};

/// The styles of one run of the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set to anything non-empty (https://no-color.org).
    pub fn from_env() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme { color: !no_color }
    }

    pub fn plain() -> Self {
        Theme { color: false }
    }

    fn fg(&self, color: Color) -> Style {
        if self.color {
            Style::default().fg(color)
        } else {
            Style::default()
        }
    }

    pub fn state(&self, state: State) -> Style {
        match state {
            State::Paused => self.fg(Color::Cyan),
            State::DeadLockStale => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            State::Unknown => self.fg(Color::Magenta),
            State::Stalled => self.fg(Color::Yellow),
            State::Running => self.fg(Color::Green),
            State::ShouldBeRunning => self.fg(Color::Red),
            State::Complete => self.fg(Color::Blue),
            State::NotRunning => self.fg(Color::DarkGray),
        }
    }

    pub fn bucket(&self, bucket: Bucket) -> Style {
        let style = match bucket {
            Bucket::Restart => self.fg(Color::Red),
            Bucket::Red => self.fg(Color::LightRed),
            Bucket::Stale => self.fg(Color::Yellow),
            Bucket::Dispatch => self.fg(Color::Cyan),
        };
        style.add_modifier(Modifier::BOLD)
    }

    /// A row's colour: its bucket's, or its state's for a job that needs nothing.
    pub fn row(&self, state: State, bucket: Option<Bucket>) -> Style {
        match bucket {
            Some(bucket) => self.bucket(bucket),
            None => self.state(state),
        }
    }

    pub fn heading(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }

    pub fn dim(&self) -> Style {
        if self.color {
            Style::default().fg(Color::DarkGray)
        } else {
            Style::default()
        }
    }

    pub fn alarm(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub fn warning(&self) -> Style {
        self.fg(Color::Yellow)
    }

    pub fn good(&self) -> Style {
        self.fg(Color::Green)
    }

    pub fn selected(&self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }

    pub fn focused_border(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
}

/// A one-character mark per bucket, readable without colour: a row in the action list wears
/// its bucket's mark (a RED job never looks healthy because its process is alive), and no two
/// buckets share one.
pub fn bucket_mark(bucket: Bucket) -> &'static str {
    match bucket {
        Bucket::Restart => "↻",
        Bucket::Red => "✖",
        Bucket::Stale => "‖",
        Bucket::Dispatch => "➜",
    }
}

/// A row's mark: its bucket's, or its state's for a job that needs nothing.
pub fn mark(state: State, bucket: Option<Bucket>) -> &'static str {
    match bucket {
        Some(bucket) => bucket_mark(bucket),
        None => symbol(state),
    }
}

/// Every mark the dashboard draws and what it means, as `?` lists them: the legend.
pub const LEGEND: [(&str, &str); 16] = [
    ("⚑", "an approval waits for a human (APPROVALS)"),
    ("↻", "RESTART: dead holder, or should run and does not"),
    ("✖", "RED: a check failed or a rule is broken"),
    ("‖", "STALE: stalled, unknown, a timeout or a marker"),
    ("➜", "DISPATCH: never started, ready (held while RED)"),
    ("▶", "running"),
    ("✔", "complete"),
    ("·", "not running, not due"),
    ("⊘", "paused on purpose (p resumes)"),
    ("?", "cannot tell: a fault, or liveness unknown"),
    ("●", "changed since you last looked"),
    ("↑ ↓", "more of the list above or below"),
    ("▁▂▃▅▇", "recent rate of progress, newest right"),
    ("⚠", "a banner or notice: dispatch held, escalation"),
    ("✔ ✖ ?", "in the detail: a check passed, failed, faulted"),
    ("/", "search or filter being typed"),
];

/// A one-character symbol per state, readable without colour.
pub fn symbol(state: State) -> &'static str {
    match state {
        State::Paused => "⊘",
        State::DeadLockStale => "✖",
        State::Unknown => "?",
        State::Stalled => "‖",
        State::Running => "▶",
        // Outside a bucket only in the detail: the row of a job that should run wears its
        // bucket's mark (↻ RESTART, ➜ DISPATCH).
        State::ShouldBeRunning => "↻",
        State::Complete => "✔",
        State::NotRunning => "·",
    }
}

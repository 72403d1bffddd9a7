//! The dashboard's state and its one transition function, `update` (The Elm Architecture).
//!
//! The model carries everything the screen shows, `now` included, so `view` is a pure
//! function of it and a snapshot test is deterministic. `update` turns one message (a key, a
//! mouse event, a new snapshot from the engine, the passing of time, a log tail) into a new
//! model and at most one [`Command`] for the runtime to carry out. It performs no I/O itself:
//! it never reads a file, a clock or a process, and it never acts on a job.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use chrono::{DateTime, Duration, Utc};
use crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};

use super::layout::{self, Areas};
use super::theme::Theme;
use crate::config::JobSpec;
use crate::core::decision::Decision;
use crate::core::digest::{Digest, DigestItem};
use crate::core::escalate::Condition;
use crate::core::{Assessment, Bucket, FileStamp, Reading};
use crate::engine::Event;
use crate::engine::{Action, Snapshot};
use crate::probe::zone::Zone;

/// How long the rate history behind sparklines and ETAs reaches back.
const HISTORY: Duration = Duration::minutes(15);
/// The width in time of one sparkline cell.
pub const SPARK_BUCKET_SECS: i64 = 15;
/// Lines of log tail the detail pane asks for.
pub const TAIL_LINES: usize = 200;

/// Which pane the movement keys act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    List,
    Detail,
}

pub use super::dialog::{Answer, Dialog, Focus};

pub use super::chooser::{Choices, Chooser};

/// The event log, for one job or all.
#[derive(Debug, Clone, PartialEq)]
pub struct EventsView {
    /// `None`: every job.
    pub job: Option<String>,
    /// When the operator last looked: the view opens at the first event after it, under a
    /// line that says so.
    pub since: Option<DateTime<Utc>>,
    /// Whether the first rows have arrived (the view is placed once, at its opening).
    pub placed: bool,
    pub rows: Result<Vec<Event>, String>,
    /// Lines scrolled up from the newest.
    pub scroll: usize,
}

/// The daily digest view (`D`): the newest digest not yet marked read, and the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct DigestView {
    pub latest: Option<Digest>,
    /// Digests cut before it (for the rise-in-suppressions baseline).
    pub previous: Vec<Digest>,
    /// Items queued since the last cut.
    pub pending: Vec<DigestItem>,
    /// The decisions (operators' and the machine's) and escalations of each digest's day, by
    /// its id; `None` for the day since the last cut.
    pub happened: HashMap<Option<i64>, Vec<Event>>,
    pub scroll: usize,
}

/// The kinds of event a digest lists beside what queued: what was decided, and what
/// interrupted a human.
pub const DECIDED_KINDS: [&str; 12] = [
    "confirmed",
    "declined",
    "approved",
    "denied",
    "released",
    "paused",
    "resumed",
    "acknowledged",
    "verified",
    "failed",
    "cap-reached",
    "escalated",
];

/// How many of a log's last lines the log view (`l`) reads; the whole file is one key away
/// in `$PAGER`.
pub const LOG_LINES: usize = 5000;

/// The log view (`l`): a job's log over the whole body, still while scrolled up, searchable.
#[derive(Debug, Clone, PartialEq)]
pub struct LogView {
    pub job: String,
    pub path: PathBuf,
    /// The lines shown, oldest first: the rotated predecessor's, then the log's own.
    pub lines: Vec<String>,
    /// Where the predecessor's lines end and the log's own begin (0 when there are none), and
    /// the predecessor's path.
    pub earlier: Option<(usize, PathBuf)>,
    /// Why the log cannot be shown, or that it is empty or missing.
    pub trouble: Option<String>,
    /// Lines scrolled up from the newest (0: the end of the log in view).
    pub scroll: usize,
    /// A newer reading that arrived while scrolled up: kept aside so the view stays still,
    /// shown at the bottom (G).
    pub newer: Option<Box<LogView>>,
    /// The search being typed after `/`.
    pub typing: Option<String>,
    /// The last search, and the line of the match shown.
    pub pattern: Option<String>,
    pub hit: Option<usize>,
    /// The log's stamp when it was read: a newer stamp means read it again.
    pub stamp: Option<Option<FileStamp>>,
}

impl LogView {
    /// A log view of `job` reading `path`, loaded from a tail read.
    pub fn loaded(
        job: String,
        path: PathBuf,
        lines: Reading<Vec<String>>,
        earlier: Option<crate::probe::tail::EarlierLines>,
    ) -> LogView {
        let mut all = Vec::new();
        let mut split = None;
        if let Some(earlier) = earlier {
            all.extend(earlier.lines);
            split = Some((all.len(), earlier.path));
        }
        let trouble = match lines {
            Reading::Found(own) => {
                all.extend(own);
                None
            }
            Reading::Empty => Some("empty: nothing written yet".to_string()),
            Reading::Fault(error) => Some(format!("fault: {error}")),
        };
        LogView {
            job,
            path,
            lines: all,
            earlier: split,
            trouble,
            scroll: 0,
            newer: None,
            typing: None,
            pattern: None,
            hit: None,
            stamp: None,
        }
    }

    /// The lines that match `pattern` (case-insensitive unless it has a capital letter).
    pub fn matches(&self, line: &str) -> bool {
        let Some(pattern) = self.pattern.as_deref().filter(|p| !p.is_empty()) else {
            return false;
        };
        if pattern.chars().any(char::is_uppercase) {
            line.contains(pattern)
        } else {
            line.to_lowercase().contains(&pattern.to_lowercase())
        }
    }
}

/// A log tail loaded for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Tail {
    pub job: String,
    pub lines: Reading<Vec<String>>,
    /// The lines before them in the rotated predecessor, when the log holds fewer than asked.
    pub earlier: Option<crate::probe::tail::EarlierLines>,
}

/// What the operator had in front of them when they last looked: when, and each job's state
/// and bucket then. Rows that read differently now are marked.
///
/// "Looked" is the operator's last key press, or the moment the terminal lost focus (tmux
/// and most terminals report focus). A key after [`AWAY_SECS`] without one, or the terminal
/// gaining focus, is a return: the marks then show what changed since the screen was last in
/// front of them, and stay while they work. It is kept in the state directory, so a
/// dashboard started again marks what changed while none was open.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Looked {
    pub at: Option<DateTime<Utc>>,
    pub jobs: HashMap<String, (crate::core::State, Option<Bucket>)>,
}

/// The action list's filter, lower-cased once.
struct Needle(String);

impl Needle {
    /// Whether `hay` holds it, case-insensitively. An ASCII filter is looked for in an ASCII
    /// text byte by byte, with no lower-cased copy (a farm's 10,000 ids at every draw).
    fn found_in(&self, hay: &str) -> bool {
        let needle = self.0.as_bytes();
        if needle.is_ascii() && hay.is_ascii() {
            needle.is_empty()
                || hay
                    .as_bytes()
                    .windows(needle.len())
                    .any(|window| window.eq_ignore_ascii_case(needle))
        } else {
            hay.to_lowercase().contains(&self.0)
        }
    }
}

/// How long without a key counts as being away.
pub const AWAY_SECS: i64 = 120;

impl Looked {
    /// The screen as `snapshot` shows it at `at`.
    pub fn of(snapshot: &Snapshot, at: DateTime<Utc>) -> Looked {
        Looked {
            at: Some(at),
            jobs: snapshot
                .list
                .rows()
                .map(|row| (row.id.clone(), (row.state, row.bucket)))
                .collect(),
        }
    }

    /// As kept in the state directory: `{"at": ..., "jobs": {"id": ["STATE", "BUCKET"]}}`.
    pub fn to_json(&self) -> String {
        let jobs: serde_json::Map<String, serde_json::Value> = self
            .jobs
            .iter()
            .map(|(id, (state, bucket))| {
                (
                    id.clone(),
                    serde_json::json!([state.as_str(), bucket.map(Bucket::as_str)]),
                )
            })
            .collect();
        serde_json::json!({
            "at": self.at.map(|at| at.to_rfc3339()),
            "jobs": jobs,
        })
        .to_string()
    }

    /// Reads [`Looked::to_json`] back; `None` for anything else.
    pub fn from_json(text: &str) -> Option<Looked> {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        let at = value
            .get("at")?
            .as_str()
            .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
            .map(|at| at.with_timezone(&Utc));
        let mut jobs = HashMap::new();
        for (id, pair) in value.get("jobs")?.as_object()? {
            let state = crate::core::State::parse(pair.get(0)?.as_str()?)?;
            let bucket = match pair.get(1)?.as_str() {
                Some(name) => Some(Bucket::ORDER.into_iter().find(|b| b.as_str() == name)?),
                None => None,
            };
            jobs.insert(id.clone(), (state, bucket));
        }
        Some(Looked { at, jobs })
    }
}

/// Where each job is in `jobs`, by id.
fn index_jobs(jobs: &[JobSpec]) -> HashMap<String, usize> {
    jobs.iter()
        .enumerate()
        .map(|(at, job)| (job.id.clone(), at))
        .collect()
}

/// The width of the widest id of `jobs`, in characters.
fn widest_id(jobs: &[JobSpec]) -> usize {
    jobs.iter()
        .map(|job| job.id.chars().count())
        .max()
        .unwrap_or(0)
}

/// Everything the dashboard shows.
#[derive(Debug, Clone)]
pub struct Model {
    /// The moment the screen depicts. Ages are computed against it, never against a clock.
    pub now: DateTime<Utc>,
    /// The engine's own list, shared.
    pub jobs: std::sync::Arc<[JobSpec]>,
    /// Where each job is in `jobs`, by id: a row's job is looked up for every row of every
    /// frame (the filter reads its owner), and a search of the list made a frame of a farm
    /// quadratic in its jobs.
    job_at: HashMap<String, usize>,
    /// The width of the widest job id, in characters: the list's id column, as wide for
    /// every row (worked out once a list, not once a frame over 10,000 rows).
    id_chars: usize,
    /// The jobs file, shown when it declares no jobs.
    pub source: PathBuf,
    /// The latest snapshot from the engine; `None` until the first gather.
    pub snapshot: Option<Snapshot>,
    /// Recent (time, done) samples per job, for sparklines and ETAs.
    pub history: HashMap<String, VecDeque<(DateTime<Utc>, u64)>>,
    /// The selected job, by id, so the selection follows it when the order changes.
    pub selected: Option<String>,
    /// The key of the selected approval, when the cursor is on a row of the APPROVALS group
    /// (`selected` is then its job).
    pub selected_approval: Option<String>,
    /// Where the cursor was among the rows that need a human, when it was on one: when its
    /// job leaves them (released, restarted), the cursor stays at that place in the action
    /// list instead of following the job out of it.
    cursor_rank: Option<usize>,
    /// The first list line shown.
    pub list_scroll: usize,
    pub focus: Pane,
    /// The detail pane fills the body (Enter); otherwise it shares the screen if there is room.
    pub zoomed: bool,
    pub detail_scroll: u16,
    /// Lines the log tail is scrolled up from its newest (0: the end of the log in view).
    pub tail_scroll: usize,
    /// The operator looks at the log (`l`): the tail fills the detail and the movement keys
    /// scroll it.
    pub tail_focus: bool,
    pub filter: String,
    pub filter_editing: bool,
    pub help: bool,
    /// The help shows the legend of every mark rather than the keys (Tab in `?`).
    pub help_legend: bool,
    /// The last status message, kept when the next key clears the status line: `L` shows it
    /// whole.
    pub last_status: Option<String>,
    /// `L`: the last message is shown whole, until a key.
    pub status_whole: bool,
    /// A one-off message for the status line, cleared by the next key.
    pub status: Option<String>,
    pub tail: Option<Tail>,
    /// The confirmation dialog on screen, if any: it takes every key.
    pub dialog: Option<Dialog>,
    /// The chooser among a job's pending approvals, if open: it takes every key.
    pub chooser: Option<Chooser>,
    /// The log view, when open (`l`).
    pub log: Option<LogView>,
    /// The event log view, when open (`e`).
    pub events: Option<EventsView>,
    /// The digest view, when open (`D`).
    pub digest: Option<Result<DigestView, String>>,
    /// The conditions that warrant a human now (SPEC §7), as last judged.
    pub escalations: Vec<Condition>,
    /// The newest escalation, shown as a banner until the operator presses a key.
    pub banner: Option<Condition>,
    /// What the screen showed when the operator last looked at it before this return (loaded
    /// from the state directory at start): the marks compare with it. `None` until known.
    pub looked: Option<Looked>,
    /// What the screen showed at the operator's latest key (or as focus left): kept in the
    /// state directory when the dashboard ends.
    pub seen: Option<Looked>,
    /// The log's stamp when the tail was loaded: a newer stamp means load it again.
    tail_stamp: Option<Option<FileStamp>>,
    pub size: (u16, u16),
    pub theme: Theme,
    /// The zone times are shown in, named once in the header. UTC unless the runtime sets
    /// the machine's, so snapshot tests draw the same screen everywhere.
    pub zone: Zone,
    /// Set by `update` when the screen must be drawn again.
    pub dirty: bool,
    pub quit: bool,
    /// The next tick as worked out when the screen was last drawn ([`Model::drawn`]): what is
    /// in view changes only with a change that draws again, and working it out builds the
    /// whole list — at every pass of a write storm, and several times a tick for a farm.
    tick_due: Option<DateTime<Utc>>,
}

/// What can happen to the dashboard.
#[derive(Debug, Clone)]
pub enum Msg {
    Key(KeyEvent),
    Mouse(MouseEvent),
    Resize(u16, u16),
    /// The engine judged the jobs again; the snapshot's `generated_at` becomes `now`.
    Snapshot(Snapshot),
    /// Time passed with nothing else happening: ages on screen may read differently.
    Tick(DateTime<Utc>),
    /// The log tail the runtime loaded for a job.
    Tail {
        job: String,
        lines: Reading<Vec<String>>,
        /// The lines before them in the rotated predecessor, when the log holds fewer.
        earlier: Option<crate::probe::tail::EarlierLines>,
    },
    /// Something the operator should see on the status line (a watch that failed, ...).
    Status(String),
    /// A proposed decision to confirm, or why none may be proposed.
    Proposed(Result<Decision, String>),
    /// What became of an executed or declined decision, in words.
    Outcome(String),
    /// The log the runtime read for the log view.
    Log {
        job: String,
        lines: Reading<Vec<String>>,
        earlier: Option<crate::probe::tail::EarlierLines>,
    },
    /// The event log the runtime read for the events view.
    Events {
        job: Option<String>,
        rows: Result<Vec<Event>, String>,
    },
    /// The digest the runtime read for the digest view.
    Digest(Result<DigestView, String>),
    /// The conditions that hold now, and those newly entered (bell and banner for these).
    Escalations(Vec<Condition>, Vec<Condition>),
    /// The jobs file was loaded again: these are the jobs now.
    Jobs(std::sync::Arc<[JobSpec]>),
    /// What the operator last saw, as kept in the state directory (at start).
    Looked(Option<Looked>),
    /// The terminal gained (true) or lost focus.
    Focus(bool),
}

/// A side effect `update` asks the runtime to perform.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Quit,
    /// Read the last lines of `path` and answer with [`Msg::Tail`].
    LoadTail {
        job: String,
        path: PathBuf,
    },
    /// Read the last [`LOG_LINES`] lines of `path` and answer with [`Msg::Log`].
    LoadLog {
        job: String,
        path: PathBuf,
    },
    /// Hand the terminal to `$PAGER` on `path` (at its end) and take it back.
    Pager {
        path: PathBuf,
    },
    /// Gather every job's evidence again now.
    Refresh,
    /// Propose `action` on `job`; answer with [`Msg::Proposed`].
    Propose {
        action: Action,
        job: String,
    },
    /// Propose approving the pending approval `key` of `job`, chosen among several; answer
    /// with [`Msg::Proposed`].
    ProposeApproval {
        job: String,
        key: String,
    },
    /// Propose releasing the stale marker at `path` of `job`, chosen among several; answer
    /// with [`Msg::Proposed`].
    ProposeMarker {
        job: String,
        path: PathBuf,
    },
    /// Carry out a confirmed decision; answer with [`Msg::Outcome`].
    Execute(Decision),
    /// Record that the operator declined a decision; answer with [`Msg::Outcome`].
    Decline(Decision),
    /// Read the event log for `job` (every job when `None`); answer with [`Msg::Events`].
    LoadEvents {
        job: Option<String>,
    },
    /// Read the digest; answer with [`Msg::Digest`].
    LoadDigest,
    /// Mark digest `id` read (`digest-delivered`).
    MarkDigestRead(i64),
    /// Ring the terminal bell.
    Bell,
    /// Keep what the operator last saw in the state directory.
    SaveLooked(Looked),
}

/// A group of the action list: the pending approvals above it, its buckets in fixed order,
/// then the jobs that need nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Every pending approval, whatever its job's bucket: a question only a human answers.
    Approvals,
    Bucket(Bucket),
    /// The jobs that need nothing ("NO ACTION").
    Rest,
}

impl Section {
    /// Whether its rows need a human.
    pub fn needs_a_human(self) -> bool {
        !matches!(self, Section::Rest)
    }
}

/// One line of the action list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Row<'a> {
    /// A section heading with how many rows it holds.
    Heading {
        section: Section,
        count: usize,
    },
    Job(&'a Assessment),
    /// One pending approval of a job, in the APPROVALS group: selecting it and pressing `a`
    /// decides this one.
    Approval(&'a Assessment, &'a crate::core::PendingApproval),
    /// A broken rule that belongs to no job ("no machine is watching"), under RED.
    Rule(&'a str),
}

/// The lines of the action list as shown, held as runs of rows rather than a line per job:
/// a farm's screen asks for the forty lines in view, and the rest are not made.
#[derive(Debug, Default)]
pub struct Rows<'a> {
    runs: Vec<Run<'a>>,
    len: usize,
}

/// A run of lines of one kind.
#[derive(Debug)]
enum Run<'a> {
    Heading(Section, usize),
    Lines(Vec<Row<'a>>),
    /// Jobs in their order, all of a slice (no filter: not picked one by one).
    Jobs(&'a [Assessment]),
}

impl Run<'_> {
    fn len(&self) -> usize {
        match self {
            Run::Heading(..) => 1,
            Run::Lines(lines) => lines.len(),
            Run::Jobs(jobs) => jobs.len(),
        }
    }
}

impl<'a> Rows<'a> {
    fn push(&mut self, run: Run<'a>) {
        self.len += run.len();
        self.runs.push(run);
    }

    /// How many lines.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Line `at`, counted from 0.
    pub fn get(&self, at: usize) -> Option<Row<'a>> {
        let mut at = at;
        for run in &self.runs {
            if at < run.len() {
                return Some(match run {
                    Run::Heading(section, count) => Row::Heading {
                        section: *section,
                        count: *count,
                    },
                    Run::Lines(lines) => lines[at],
                    Run::Jobs(jobs) => Row::Job(&jobs[at]),
                });
            }
            at -= run.len();
        }
        None
    }

    /// Every line, in order.
    pub fn iter(&self) -> impl Iterator<Item = Row<'a>> + '_ {
        (0..self.len).filter_map(|at| self.get(at))
    }

    /// The `count` lines from `start` on (fewer at the end).
    pub fn window(&self, start: usize, count: usize) -> Vec<Row<'a>> {
        (start..self.len.min(start.saturating_add(count)))
            .filter_map(|at| self.get(at))
            .collect()
    }

    /// How many lines from `start` on are not headings: the rows below a window.
    pub fn rows_from(&self, start: usize) -> usize {
        let mut first = 0;
        let mut rows = 0;
        for run in &self.runs {
            let end = first + run.len();
            if !matches!(run, Run::Heading(..)) && end > start {
                rows += end - start.max(first);
            }
            first = end;
        }
        rows
    }
}

/// Where the cursor can rest: a job's row, or one of its approvals in the APPROVALS group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub job: String,
    /// The approval's key, for a row of the APPROVALS group.
    pub approval: Option<String>,
    /// Whether the row needs a human (an approval, or a job in a bucket).
    pub needs_a_human: bool,
}

impl Model {
    pub fn new(
        jobs: impl Into<std::sync::Arc<[JobSpec]>>,
        source: PathBuf,
        theme: Theme,
        now: DateTime<Utc>,
    ) -> Self {
        let jobs: std::sync::Arc<[JobSpec]> = jobs.into();
        Model {
            now,
            job_at: index_jobs(&jobs),
            id_chars: widest_id(&jobs),
            jobs,
            source,
            snapshot: None,
            history: HashMap::new(),
            selected: None,
            selected_approval: None,
            cursor_rank: None,
            list_scroll: 0,
            focus: Pane::List,
            zoomed: false,
            detail_scroll: 0,
            tail_scroll: 0,
            tail_focus: false,
            filter: String::new(),
            filter_editing: false,
            help: false,
            help_legend: false,
            last_status: None,
            status_whole: false,
            status: None,
            tail: None,
            dialog: None,
            chooser: None,
            log: None,
            events: None,
            digest: None,
            escalations: Vec::new(),
            banner: None,
            looked: None,
            seen: None,
            tail_stamp: None,
            size: (80, 24),
            theme,
            zone: Zone::Utc,
            dirty: true,
            tick_due: None,
            quit: false,
        }
    }

    pub fn areas(&self) -> Areas {
        self.areas_in(self.size.0, self.size.1)
    }

    /// The areas of a `width` x `height` frame, the header and the status line as tall as
    /// their words need.
    pub fn areas_in(&self, width: u16, height: u16) -> Areas {
        layout::areas(
            width,
            height,
            self.zoomed,
            super::view::header_height(self, width),
            super::view::status_height(self, width),
        )
    }

    /// The spec of job `id`.
    /// The width of the widest job id, in characters.
    pub fn id_chars(&self) -> usize {
        self.id_chars
    }

    pub fn job(&self, id: &str) -> Option<&JobSpec> {
        self.job_at
            .get(id)
            .and_then(|&at| self.jobs.get(at))
            .filter(|job| job.id == id)
            // A list put in place without its index (a test's): found the long way.
            .or_else(|| self.jobs.iter().find(|job| job.id == id))
    }

    /// Whether a row passes the filter (`needle`, from [`Model::needle`]): a case-insensitive
    /// match on id, owner, state or bucket.
    fn matches(&self, needle: Option<&Needle>, row: &Assessment) -> bool {
        let Some(needle) = needle else {
            return true;
        };
        let owner = self
            .job(&row.id)
            .and_then(|j| j.owner.as_deref())
            .unwrap_or("");
        needle.found_in(&row.id)
            || needle.found_in(owner)
            || needle.found_in(row.state.as_str())
            || row.bucket.is_some_and(|b| needle.found_in(b.as_str()))
    }

    /// The filter as matched, made once a list rather than once a row; `None` when there is
    /// no filter.
    fn needle(&self) -> Option<Needle> {
        (!self.filter.is_empty()).then(|| Needle(self.filter.to_lowercase()))
    }

    /// The lines of the action list as shown: the pending approvals first, then headings
    /// with counts and their jobs, the buckets in fixed order, then the jobs with nothing to
    /// do. Filtered.
    pub fn rows(&self) -> Rows<'_> {
        let mut rows = Rows::default();
        let Some(snapshot) = &self.snapshot else {
            return rows;
        };
        let needle = self.needle();
        let needle = needle.as_ref();
        // Counted once a list: a farm with none is not read row by row at every frame.
        if snapshot.list.pending_approvals() > 0 {
            let approvals: Vec<Row<'_>> = snapshot
                .list
                .rows()
                .filter(|a| !a.pending_approvals.is_empty() && self.matches(needle, a))
                .flat_map(|a| a.pending_approvals.iter().map(move |p| Row::Approval(a, p)))
                .collect();
            if !approvals.is_empty() {
                rows.push(Run::Heading(Section::Approvals, approvals.len()));
                rows.push(Run::Lines(approvals));
            }
        }
        for bucket in Bucket::ORDER {
            let mut lines: Vec<Row<'_>> = if bucket == Bucket::Red {
                snapshot.list.rules.iter().map(|r| Row::Rule(r)).collect()
            } else {
                Vec::new()
            };
            lines.extend(
                snapshot
                    .list
                    .bucket(bucket)
                    .filter(|a| self.matches(needle, a))
                    .map(Row::Job),
            );
            if !lines.is_empty() {
                rows.push(Run::Heading(Section::Bucket(bucket), lines.len()));
                rows.push(Run::Lines(lines));
            }
        }
        let rest = &snapshot.list.rest;
        let rest = if needle.is_none() {
            Run::Jobs(rest)
        } else {
            Run::Lines(
                rest.iter()
                    .filter(|a| self.matches(needle, a))
                    .map(Row::Job)
                    .collect(),
            )
        };
        if rest.len() > 0 {
            rows.push(Run::Heading(Section::Rest, rest.len()));
            rows.push(rest);
        }
        rows
    }

    /// Whether `row` is where the cursor is.
    pub fn is_selected(&self, row: &Row<'_>) -> bool {
        match row {
            Row::Job(a) => {
                self.selected.as_deref() == Some(a.id.as_str()) && self.selected_approval.is_none()
            }
            Row::Approval(a, p) => {
                self.selected.as_deref() == Some(a.id.as_str())
                    && self.selected_approval.as_deref() == Some(p.key.as_str())
            }
            Row::Heading { .. } | Row::Rule(_) => false,
        }
    }

    /// The window of the list in view: the first row shown, how many rows fit, and whether
    /// the first line announces what is above instead (the list scrolled down). Shared by
    /// `view` and `update`, so a click and a page key mean what is drawn.
    pub fn list_window(&self) -> Option<(usize, usize, bool)> {
        let list = self.areas().list?;
        let height = layout::list_inner_height(list).max(1);
        Some(window(self.list_scroll, height))
    }

    /// The stale markers of job `id` as last gathered and judged at the screen's moment:
    /// each path and its judgment in words, in the job's `markers:` order.
    pub fn stale_markers(&self, id: &str) -> Vec<(PathBuf, String)> {
        let job = self.job(id);
        let evidence = self.snapshot.as_ref().and_then(|s| s.evidence_of(id));
        let (Some(job), Some(evidence)) = (job, evidence) else {
            return Vec::new();
        };
        crate::core::marker::judge_markers(job, evidence, self.now)
            .into_iter()
            .filter(|marker| marker.state == crate::core::marker::MarkerState::Stale)
            .map(|marker| (marker.path, marker.words))
            .collect()
    }

    /// The selected job's assessment, if it is shown.
    pub fn selected_row(&self) -> Option<&Assessment> {
        let id = self.selected.as_deref()?;
        self.snapshot.as_ref()?.assessment_of(id)
    }

    /// Seconds since the freshest progress of `row`, as of `now`.
    pub fn age_now(&self, row: &Assessment) -> Option<f64> {
        let snapshot = self.snapshot.as_ref()?;
        let drift = (self.now - snapshot.generated_at).num_milliseconds().max(0) as f64 / 1000.0;
        row.progress_age_sec.map(|age| age + drift)
    }

    /// The ages the screen shows, in seconds: the rows in view, and the selected job's
    /// progress and evidence when its detail is on screen. Only these can make a tick worth
    /// drawing.
    fn shown_ages(&self) -> Vec<f64> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let areas = self.areas();
        let mut ages = Vec::new();
        if let Some((start, shown, _)) = self.list_window().filter(|_| self.events.is_none()) {
            for row in self.rows().window(start, shown) {
                if let Row::Job(a) = row
                    && let Some(age) = self.age_now(a)
                {
                    ages.push(age);
                }
            }
        }
        if areas.detail.is_some()
            && let Some(id) = self.selected.as_deref()
        {
            if let Some(age) = self.selected_row().and_then(|a| self.age_now(a)) {
                ages.push(age);
            }
            if let Some(seen) = snapshot.evidence_of(id) {
                let since =
                    |at: DateTime<Utc>| (self.now - at).num_milliseconds().max(0) as f64 / 1000.0;
                let stamps = [
                    seen.log
                        .as_ref()
                        .and_then(|r| r.found())
                        .map(|f| f.modified),
                    seen.progress_file
                        .as_ref()
                        .and_then(|r| r.found())
                        .map(|f| f.modified),
                    seen.progress_table
                        .as_ref()
                        .and_then(|r| r.found())
                        .map(|t| t.newest),
                    seen.manifest
                        .as_ref()
                        .and_then(|r| r.found())
                        .map(|m| m.updated_at),
                    seen.heartbeat
                        .as_ref()
                        .and_then(|r| r.found())
                        .map(|h| h.at),
                ];
                ages.extend(stamps.into_iter().flatten().map(since));
            }
        }
        ages
    }

    /// The next moment the screen would read differently with nothing else happening: the
    /// header clock's minute, or a shown age crossing its display step. Ticks fall on
    /// wall-clock boundaries of the smallest step in view, so a hundred quiet jobs cost one
    /// wake-up per step, not one each; an age may show up to one step late.
    pub fn next_tick(&self) -> DateTime<Utc> {
        self.tick_due.unwrap_or_else(|| self.work_out_next_tick())
    }

    /// The screen was drawn as the model now stands: the next tick is worked out once, for
    /// every look at [`Model::next_tick`] until the next draw.
    pub fn drawn(&mut self) {
        self.dirty = false;
        self.tick_due = Some(self.work_out_next_tick());
    }

    fn work_out_next_tick(&self) -> DateTime<Utc> {
        let step = self
            .shown_ages()
            .into_iter()
            .map(age_step)
            .min()
            .unwrap_or(60)
            .min(60);
        next_boundary(self.now, step)
    }

    /// A key: the operator is looking now. After [`AWAY_SECS`] without one they have come
    /// back, and the marks move to compare with what they saw before they left.
    fn note_a_look(&mut self) {
        let Some(snapshot) = &self.snapshot else {
            return;
        };
        let now_seen = Looked::of(snapshot, self.now);
        let away = self
            .seen
            .as_ref()
            .and_then(|seen| seen.at)
            .is_none_or(|at| (self.now - at).num_seconds() >= AWAY_SECS);
        // With nothing known of an earlier look (a first start), nothing is marked.
        if away && let Some(seen) = self.seen.take() {
            self.looked = Some(seen);
        }
        self.seen = Some(now_seen);
    }

    /// Whether `row` reads differently from when the operator last looked: another state or
    /// bucket, or a job they have not seen.
    pub fn changed_since_looked(&self, row: &Assessment) -> bool {
        self.looked
            .as_ref()
            .is_some_and(|looked| looked.jobs.get(&row.id) != Some(&(row.state, row.bucket)))
    }

    /// Where the cursor can rest, in the order shown.
    pub fn stops(&self) -> Vec<Stop> {
        let mut section = Section::Rest;
        self.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Heading { section: s, .. } => {
                    section = s;
                    None
                }
                Row::Job(a) => Some(Stop {
                    job: a.id.clone(),
                    approval: None,
                    needs_a_human: section.needs_a_human(),
                }),
                Row::Approval(a, p) => Some(Stop {
                    job: a.id.clone(),
                    approval: Some(p.key.clone()),
                    needs_a_human: true,
                }),
                Row::Rule(_) => None,
            })
            .collect()
    }

    fn at_stop(&self, stop: &Stop) -> bool {
        self.selected.as_deref() == Some(stop.job.as_str())
            && self.selected_approval == stop.approval
    }

    fn select_stop(&mut self, stop: Option<&Stop>) {
        let (job, approval) = match stop {
            Some(stop) => (Some(stop.job.clone()), stop.approval.clone()),
            None => (None, None),
        };
        if self.selected != job {
            self.detail_scroll = 0;
            self.tail_scroll = 0;
        }
        self.selected = job;
        self.selected_approval = approval;
    }

    fn select_first_if_needed(&mut self) {
        let stops = self.stops();
        if !stops.iter().any(|s| self.at_stop(s)) {
            // An approval decided meanwhile: its job's own row, if it is shown.
            let own = stops
                .iter()
                .find(|s| self.selected.as_deref() == Some(s.job.as_str()) && s.approval.is_none());
            let first = own.or(stops.first()).cloned();
            self.select_stop(first.as_ref());
        }
    }

    /// After a new snapshot: when the cursor was on a row that needs a human and its job no
    /// longer needs one (released, restarted, decided), the cursor stays at the same place
    /// among the rows that do: the next thing that needs a human, not the job on its way out.
    fn keep_the_cursor_on_what_needs_a_human(&mut self) {
        let Some(rank) = self.cursor_rank else {
            return;
        };
        let stops = self.stops();
        let here = stops.iter().find(|s| self.at_stop(s));
        if here.is_some_and(|s| s.needs_a_human) {
            return;
        }
        let waiting: Vec<&Stop> = stops.iter().filter(|s| s.needs_a_human).collect();
        if let Some(next) = waiting.get(rank).or(waiting.last()).map(|s| (*s).clone()) {
            self.select_stop(Some(&next));
        }
    }

    /// Notes where the cursor is among the rows that need a human.
    fn remember_rank(&mut self) {
        let stops = self.stops();
        self.cursor_rank = stops
            .iter()
            .filter(|s| s.needs_a_human)
            .position(|s| self.at_stop(s));
    }

    /// Moves the selection `delta` rows (negative is up), clamped at the ends.
    fn move_selection(&mut self, delta: isize) {
        let stops = self.stops();
        if stops.is_empty() {
            self.select_stop(None);
            return;
        }
        let at = stops.iter().position(|s| self.at_stop(s)).unwrap_or(0) as isize;
        let to = (at + delta).clamp(0, stops.len() as isize - 1) as usize;
        self.select_stop(Some(&stops[to]));
    }

    /// Keeps the selected row (and, when it is the first of its section, its heading) in
    /// the visible part of the list; a scrolled list gives its first line to what is above.
    fn ensure_visible(&mut self) {
        let Some(list) = self.areas().list else {
            return;
        };
        let height = layout::list_inner_height(list).max(1);
        let rows = self.rows();
        let line = rows.iter().position(|r| self.is_selected(&r));
        let max_scroll = if rows.len() <= height {
            0
        } else {
            rows.len() - height.saturating_sub(1).max(1)
        };
        if let Some(line) = line {
            let top = if line > 0 && matches!(rows.get(line - 1), Some(Row::Heading { .. })) {
                line - 1
            } else {
                line
            };
            let (start, shown, _) = window(self.list_scroll, height);
            if top < start || top == 0 {
                self.list_scroll = top;
            } else if line >= start + shown {
                let (_, scrolled, _) = window(1, height);
                self.list_scroll = line + 1 - scrolled;
            }
        }
        self.list_scroll = self.list_scroll.min(max_scroll);
    }

    /// The log to read again for the log view, when it is open and its log changed.
    fn log_command(&mut self) -> Option<Command> {
        let stamp = {
            let view = self.log.as_ref()?;
            self.snapshot
                .as_ref()
                .and_then(|s| s.evidence_of(&view.job))
                .and_then(|e| e.log.as_ref())
                .and_then(|r| r.found().cloned())
        };
        let view = self.log.as_mut()?;
        if view.stamp.as_ref() == Some(&stamp) {
            return None;
        }
        view.stamp = Some(stamp);
        Some(Command::LoadLog {
            job: view.job.clone(),
            path: view.path.clone(),
        })
    }

    /// The tail to load for the selected job, if it is not loaded or its log changed.
    fn tail_command(&mut self) -> Option<Command> {
        let id = self.selected.clone()?;
        let job = self.job(&id)?;
        let path = job.log.clone()?;
        let stamp = self
            .snapshot
            .as_ref()
            .and_then(|s| s.evidence_of(&id))
            .and_then(|e| e.log.as_ref())
            .and_then(|r| r.found().cloned());
        let loaded_for_this = self.tail.as_ref().is_some_and(|t| t.job == id);
        if loaded_for_this && self.tail_stamp.as_ref() == Some(&stamp) {
            return None;
        }
        self.tail_stamp = Some(stamp);
        Some(Command::LoadTail { job: id, path })
    }

    fn record_history(&mut self, snapshot: &Snapshot) {
        let at = snapshot.generated_at;
        for row in snapshot.list.rows() {
            let Some(done) = row.done else { continue };
            let samples = self.history.entry(row.id.clone()).or_default();
            let changed = samples.back().is_none_or(|&(_, last)| last != done);
            let old = samples
                .back()
                .is_none_or(|&(t, _)| at - t >= Duration::seconds(SPARK_BUCKET_SECS));
            if changed || old {
                samples.push_back((at, done));
            }
            while samples.front().is_some_and(|&(t, _)| at - t > HISTORY) {
                samples.pop_front();
            }
        }
    }
}

/// How often a shown age is drawn again when nothing else happens: every second in its first
/// minute, every 10 s up to 1000 s, every minute up to two days, then every hour. It is spelled
/// as [`crate::core::assess::fmt_secs`] writes it (as `check` does) and exact when drawn; between
/// two steps it may lag by up to one. Drawing every second up to 1000 s put an idle dashboard of
/// quiet jobs at 0.7 % of a core, fourteen times the idle target.
pub fn age_step(age_sec: f64) -> i64 {
    if age_sec < 60.0 {
        1
    } else if age_sec < 1000.0 {
        10
    } else if age_sec < 172_800.0 {
        60
    } else {
        3600
    }
}

/// The next instant after `now` that is a whole multiple of `step` seconds since the epoch.
fn next_boundary(now: DateTime<Utc>, step: i64) -> DateTime<Utc> {
    let ms = now.timestamp_millis();
    let step_ms = step * 1000;
    let next = (ms.div_euclid(step_ms) + 1) * step_ms;
    DateTime::from_timestamp_millis(next).unwrap_or(now + Duration::seconds(step))
}

/// Applies one message. Returns what the runtime must do, if anything.
pub fn update(model: &mut Model, msg: Msg) -> Option<Command> {
    match msg {
        Msg::Key(key) => {
            if key.kind == KeyEventKind::Release {
                return None;
            }
            model.dirty = true;
            model.note_a_look();
            let command = on_key(model, key);
            model.remember_rank();
            command
        }
        Msg::Looked(looked) => {
            model.looked = looked.clone();
            model.seen = looked;
            model.dirty = true;
            None
        }
        Msg::Focus(gained) => {
            let snapshot = model.snapshot.as_ref()?;
            let now_seen = Looked::of(snapshot, model.now);
            if gained {
                // Back in front of it: the marks show what changed since it was left.
                model.looked = model.seen.clone().or(Some(now_seen));
                model.dirty = true;
                None
            } else {
                model.seen = Some(now_seen.clone());
                Some(Command::SaveLooked(now_seen))
            }
        }
        Msg::Mouse(mouse) => {
            let command = on_mouse(model, mouse);
            model.remember_rank();
            command
        }
        Msg::Resize(width, height) => {
            model.size = (width, height);
            model.dirty = true;
            model.ensure_visible();
            None
        }
        Msg::Snapshot(snapshot) => {
            model.now = model.now.max(snapshot.generated_at);
            model.record_history(&snapshot);
            model.snapshot = Some(snapshot);
            model.select_first_if_needed();
            model.keep_the_cursor_on_what_needs_a_human();
            model.ensure_visible();
            model.remember_rank();
            model.dirty = true;
            model.log_command().or_else(|| model.tail_command())
        }
        Msg::Jobs(jobs) => {
            model.job_at = index_jobs(&jobs);
            model.id_chars = widest_id(&jobs);
            model.jobs = jobs;
            model.dirty = true;
            None
        }
        Msg::Tick(now) => {
            if now > model.now {
                // Draw when the next tick has come: a shown age crosses its step, or the
                // header's minute turns.
                let due = model.next_tick();
                model.now = now;
                if now >= due {
                    model.dirty = true;
                }
            }
            None
        }
        Msg::Tail {
            job,
            lines,
            earlier,
        } => {
            if model.selected.as_deref() == Some(job.as_str()) {
                model.tail = Some(Tail {
                    job,
                    lines,
                    earlier,
                });
                model.dirty = true;
            }
            None
        }
        Msg::Status(text) => {
            model.status = Some(text);
            model.dirty = true;
            None
        }
        Msg::Proposed(Ok(decision)) => {
            model.dialog = Some(Dialog::at(decision, Some(model.now)));
            model.dirty = true;
            None
        }
        Msg::Proposed(Err(why)) | Msg::Outcome(why) => {
            model.status = Some(why);
            model.dirty = true;
            None
        }
        Msg::Digest(digest) => {
            if model.digest.is_some() {
                let scroll = match &model.digest {
                    Some(Ok(view)) => view.scroll,
                    _ => 0,
                };
                model.digest = Some(digest.map(|mut view| {
                    view.scroll = scroll;
                    view
                }));
                model.dirty = true;
            }
            None
        }
        Msg::Escalations(holding, fresh) => {
            if holding != model.escalations {
                model.dirty = true;
            }
            model.escalations = holding;
            // A banner stays until the operator has seen it (a key) or the condition ends.
            if let Some(banner) = &model.banner
                && !model.escalations.contains(banner)
            {
                model.banner = None;
                model.dirty = true;
            }
            match fresh.last() {
                Some(newest) => {
                    model.banner = Some(newest.clone());
                    model.dirty = true;
                    Some(Command::Bell)
                }
                None => None,
            }
        }
        Msg::Log {
            job,
            lines,
            earlier,
        } => {
            let view = model.log.as_mut().filter(|v| v.job == job)?;
            let mut fresh = LogView::loaded(job, view.path.clone(), lines, earlier);
            fresh.stamp = view.stamp.clone();
            fresh.pattern = view.pattern.clone();
            if view.scroll == 0 {
                fresh.typing = view.typing.take();
                *view = fresh;
            } else {
                // Scrolled up: what the operator reads stays where it is.
                view.newer = Some(Box::new(fresh));
            }
            model.dirty = true;
            None
        }
        Msg::Events { job, rows } => {
            let page = usize::from(model.size.1.saturating_sub(6)).max(1);
            if let Some(view) = model.events.as_mut().filter(|v| v.job == job) {
                // Opened at what happened since the operator last looked: the first of it at
                // the top when it is more than a page.
                if !view.placed
                    && let (Ok(rows), Some(since)) = (&rows, view.since)
                {
                    let first_new = rows.iter().position(|e| e.at > since).unwrap_or(rows.len());
                    view.scroll = rows.len().saturating_sub(first_new + page);
                }
                view.placed = true;
                view.rows = rows;
                model.dirty = true;
            }
            None
        }
    }
}

/// Keys while a dialog is open: it takes them all (see [`super::dialog::on_key`]).
fn on_dialog_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    match super::dialog::on_key(&mut model.dialog, &mut model.status, key) {
        Answer::Open => None,
        Answer::Decline(decision) => Some(Command::Decline(decision)),
        Answer::Execute(decision) => Some(Command::Execute(decision)),
    }
}

/// Keys while a chooser is open (the one chooser both screens use): a pick proposes that
/// approval or marker, which opens the confirmation dialog.
fn on_chooser_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    match super::chooser::on_key(&mut model.chooser, &mut model.status, key) {
        super::chooser::Picked::Open | super::chooser::Picked::Closed => None,
        super::chooser::Picked::Quit => {
            model.quit = true;
            Some(Command::Quit)
        }
        super::chooser::Picked::Approval { job, key } => {
            Some(Command::ProposeApproval { job, key })
        }
        super::chooser::Picked::Marker { job, path } => Some(Command::ProposeMarker { job, path }),
    }
}

/// Keys while the digest view is open: scroll, `m` marks the shown digest read, Esc or `D`
/// closes.
fn on_digest_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    let page = usize::from(model.size.1.saturating_sub(6)).max(1);
    let digest = model.digest.as_mut()?;
    match key.code {
        KeyCode::Esc | KeyCode::Char('D') => model.digest = None,
        KeyCode::Char('q') => {
            model.quit = true;
            return Some(Command::Quit);
        }
        KeyCode::Char('m') => {
            let id = digest
                .as_ref()
                .ok()
                .and_then(|v| v.latest.as_ref())
                .map(|d| d.id);
            return match id {
                Some(id) => Some(Command::MarkDigestRead(id)),
                None => {
                    model.status = Some("no digest has been cut yet: nothing to mark read".into());
                    None
                }
            };
        }
        code => {
            if let Ok(view) = digest {
                match code {
                    KeyCode::Down | KeyCode::Char('j') => {
                        view.scroll = view.scroll.saturating_add(1)
                    }
                    KeyCode::Up | KeyCode::Char('k') => view.scroll = view.scroll.saturating_sub(1),
                    KeyCode::PageDown => view.scroll = view.scroll.saturating_add(page),
                    KeyCode::PageUp => view.scroll = view.scroll.saturating_sub(page),
                    KeyCode::Char('g') | KeyCode::Home => view.scroll = 0,
                    _ => {}
                }
            }
        }
    }
    None
}

/// Keys while the log view is open: scroll (it stays still while lines arrive), `/` to search
/// toward older lines, `n` the next older match, `N` the next newer, `o` the log in `$PAGER`,
/// G (or scrolling down to the end) the newest lines, Esc or `l` back.
fn on_log_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    let page = usize::from(model.size.1.saturating_sub(6)).max(1);
    let typing = model.log.as_ref().is_some_and(|v| v.typing.is_some());
    match key.code {
        KeyCode::Esc | KeyCode::Char('l') if !typing => {
            model.log = None;
            return None;
        }
        KeyCode::Char('q') if !typing => {
            model.quit = true;
            return Some(Command::Quit);
        }
        _ => {}
    }
    let view = model.log.as_mut()?;
    if let Some(typing) = view.typing.as_mut() {
        match key.code {
            KeyCode::Esc => view.typing = None,
            KeyCode::Enter => {
                view.pattern = view.typing.take().filter(|p| !p.is_empty());
                view.hit = None;
                let found = search(view, true, page);
                if !found {
                    model.status = Some(not_found(view));
                }
            }
            KeyCode::Backspace => {
                typing.pop();
            }
            KeyCode::Char(c) if !c.is_control() && typing.chars().count() < 200 => typing.push(c),
            _ => {}
        }
        return None;
    }
    let total = view.lines.len();
    let most = total.saturating_sub(1);
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => view.scroll = (view.scroll + 1).min(most),
        KeyCode::Down | KeyCode::Char('j') => view.scroll = view.scroll.saturating_sub(1),
        KeyCode::PageUp => view.scroll = (view.scroll + page).min(most),
        KeyCode::PageDown => view.scroll = view.scroll.saturating_sub(page),
        KeyCode::Char('g') | KeyCode::Home => view.scroll = most,
        KeyCode::Char('G') | KeyCode::End => view.scroll = 0,
        KeyCode::Char('/') => view.typing = Some(String::new()),
        KeyCode::Char(c @ ('n' | 'N')) => {
            if view.pattern.is_none() {
                model.status = Some("no search yet: / and a word first".to_string());
            } else if !search(view, c == 'n', page) {
                model.status = Some(not_found(view));
            }
        }
        KeyCode::Char('o') => {
            return Some(Command::Pager {
                path: view.path.clone(),
            });
        }
        _ => {}
    }
    // Back at the end: the lines that arrived meanwhile are shown.
    if view.scroll == 0
        && let Some(newer) = view.newer.take()
    {
        let pattern = view.pattern.clone();
        *view = *newer;
        view.pattern = pattern;
    }
    None
}

/// Moves to the next match older (`back`) or newer than the one shown (or than the bottom
/// line in view), scrolled so that it is in view. False when there is none.
fn search(view: &mut LogView, back: bool, page: usize) -> bool {
    let total = view.lines.len();
    if total == 0 {
        return false;
    }
    let from = view
        .hit
        .unwrap_or_else(|| total.saturating_sub(1 + view.scroll) + usize::from(back));
    let found = if back {
        (0..from.min(total))
            .rev()
            .find(|&i| view.matches(&view.lines[i]))
    } else {
        (from + 1..total).find(|&i| view.matches(&view.lines[i]))
    };
    match found {
        Some(at) => {
            view.hit = Some(at);
            // The match a third of a page above the bottom, so what follows it shows too.
            let below = (total - 1 - at).saturating_sub(page / 3);
            view.scroll = below;
            true
        }
        None => false,
    }
}

fn not_found(view: &LogView) -> String {
    format!(
        "'{}' not found {} in the last {} lines read (o: the whole log in $PAGER)",
        crate::core::text::inert(view.pattern.as_deref().unwrap_or_default()),
        if view.hit.is_some() {
            "beyond this match"
        } else {
            "above"
        },
        view.lines.len()
    )
}

/// Keys while the events view is open.
fn on_events_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    let view = model.events.as_mut()?;
    let page = usize::from(model.size.1.saturating_sub(6)).max(1);
    match key.code {
        KeyCode::Esc | KeyCode::Char('e') => model.events = None,
        KeyCode::Up | KeyCode::Char('k') => view.scroll = view.scroll.saturating_add(1),
        KeyCode::Down | KeyCode::Char('j') => view.scroll = view.scroll.saturating_sub(1),
        KeyCode::PageUp => view.scroll = view.scroll.saturating_add(page),
        KeyCode::PageDown => view.scroll = view.scroll.saturating_sub(page),
        KeyCode::Char('g') | KeyCode::Home => view.scroll = usize::MAX / 2,
        KeyCode::Char('G') | KeyCode::End => view.scroll = 0,
        KeyCode::Char('a') => {
            // Between the selected job's events and everyone's.
            view.job = match view.job {
                Some(_) => None,
                None => model.selected.clone(),
            };
            view.scroll = 0;
            view.rows = Ok(Vec::new());
            return Some(Command::LoadEvents {
                job: view.job.clone(),
            });
        }
        KeyCode::Char('q') => {
            model.quit = true;
            return Some(Command::Quit);
        }
        _ => {}
    }
    None
}

fn on_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c' | 'C')) {
        model.quit = true;
        return Some(Command::Quit);
    }
    if let Some(status) = model.status.take() {
        model.last_status = Some(status);
    }
    // Any key means the operator has seen the banner.
    model.banner = None;
    if model.dialog.is_some() {
        return on_dialog_key(model, key);
    }
    if model.chooser.is_some() {
        return on_chooser_key(model, key);
    }
    if model.digest.is_some() {
        return on_digest_key(model, key);
    }
    if model.events.is_some() {
        return on_events_key(model, key);
    }
    if model.log.is_some() {
        return on_log_key(model, key);
    }
    if model.filter_editing {
        return on_filter_key(model, key);
    }
    if model.help {
        match key.code {
            KeyCode::Char('q') => {
                model.quit = true;
                return Some(Command::Quit);
            }
            KeyCode::Tab | KeyCode::BackTab | KeyCode::Left | KeyCode::Right => {
                model.help_legend = !model.help_legend
            }
            _ => model.help = false,
        }
        return None;
    }
    if model.status_whole {
        model.status_whole = false;
        return None;
    }
    let page = page_height(model) as isize;
    match key.code {
        KeyCode::Char('q') => {
            model.quit = true;
            return Some(Command::Quit);
        }
        KeyCode::Char('?') => {
            model.help = true;
            model.help_legend = false;
        }
        KeyCode::Char('L') => model.status_whole = true,
        KeyCode::Char('/') => model.filter_editing = true,
        KeyCode::Esc => {
            if model.tail_focus {
                model.tail_focus = false;
                model.zoomed = false;
                model.focus = Pane::List;
            } else if model.zoomed {
                model.zoomed = false;
                model.focus = Pane::List;
            } else if !model.filter.is_empty() {
                model.filter.clear();
                model.select_first_if_needed();
            }
        }
        KeyCode::Enter => {
            if model.zoomed {
                model.tail_focus = false;
                model.zoomed = false;
                model.focus = Pane::List;
            } else if model.selected.is_some() {
                model.zoomed = true;
                model.focus = Pane::Detail;
            }
        }
        KeyCode::Tab | KeyCode::BackTab => {
            let detail_shown = model.areas().detail.is_some();
            match model.focus {
                Pane::List if detail_shown => model.focus = Pane::Detail,
                Pane::List if model.selected.is_some() => {
                    model.zoomed = true;
                    model.focus = Pane::Detail;
                }
                Pane::List => {}
                Pane::Detail => {
                    model.focus = Pane::List;
                    model.zoomed = false;
                    model.tail_focus = false;
                }
            }
        }
        KeyCode::Up | KeyCode::Char('k') => return step(model, -1),
        KeyCode::Down | KeyCode::Char('j') => return step(model, 1),
        KeyCode::PageUp => return step(model, -page.max(1)),
        KeyCode::PageDown => return step(model, page.max(1)),
        KeyCode::Home | KeyCode::Char('g') => return step(model, -(isize::MAX / 2)),
        KeyCode::End | KeyCode::Char('G') => return step(model, isize::MAX / 2),
        // The log over the whole body, on its newest lines; `l` again goes back.
        KeyCode::Char('l') => {
            let Some(id) = model.selected.clone() else {
                model.status = Some("select a job first".to_string());
                return None;
            };
            let Some(path) = model.job(&id).and_then(|job| job.log.clone()) else {
                model.status = Some(format!(
                    "'{id}' declares no log: add 'log:' to its stanza to read it here"
                ));
                return None;
            };
            let mut view = LogView::loaded(id, path, Reading::Empty, None);
            view.trouble = Some("reading…".to_string());
            model.log = Some(view);
            return model.log_command();
        }
        KeyCode::Char('R') => {
            model.status = Some("gathering every job's evidence again".to_string());
            return Some(Command::Refresh);
        }
        KeyCode::Char(c @ ('r' | 'x' | 'M' | 'a')) => {
            let Some(job) = model.selected.clone() else {
                model.status = Some("select a job first".to_string());
                return None;
            };
            // On a row of the APPROVALS group: that question.
            if c == 'a'
                && let Some(key) = model.selected_approval.clone()
            {
                return Some(Command::ProposeApproval { job, key });
            }
            // Several questions waiting: the operator picks one before any dialog.
            if c == 'a'
                && let Some(row) = model.selected_row()
                && row.pending_approvals.len() > 1
            {
                model.chooser = Some(Chooser {
                    job,
                    choices: Choices::Approvals(row.pending_approvals.clone()),
                    at: 0,
                });
                return None;
            }
            // Several stale markers: the bare release would be refused; the operator picks.
            if c == 'M' {
                let stale = model.stale_markers(&job);
                if stale.len() > 1 {
                    model.chooser = Some(Chooser {
                        job,
                        choices: Choices::Markers(stale),
                        at: 0,
                    });
                    return None;
                }
            }
            let action = match c {
                'r' => Action::Restart,
                'x' => Action::Release,
                'M' => Action::ReleaseMarker,
                _ => Action::Approve,
            };
            return Some(Command::Propose { action, job });
        }
        KeyCode::Char(c @ ('p' | 'K')) => {
            let Some(row) = model.selected_row() else {
                model.status = Some("select a job first".to_string());
                return None;
            };
            // One key pauses a job and resumes a paused one.
            let action = match c {
                'p' if row.paused.is_some() => Action::Resume,
                'p' => Action::Pause,
                _ => Action::Acknowledge,
            };
            let job = row.id.clone();
            return Some(Command::Propose { action, job });
        }
        KeyCode::Char('e') => {
            let job = model.selected.clone();
            model.events = Some(EventsView {
                job: job.clone(),
                since: model.looked.as_ref().and_then(|l| l.at),
                placed: false,
                rows: Ok(Vec::new()),
                scroll: 0,
            });
            return Some(Command::LoadEvents { job });
        }
        KeyCode::Char('D') => {
            model.digest = Some(Ok(DigestView {
                latest: None,
                previous: Vec::new(),
                pending: Vec::new(),
                happened: HashMap::new(),
                scroll: 0,
            }));
            return Some(Command::LoadDigest);
        }
        _ => {}
    }
    model.ensure_visible();
    None
}

fn on_filter_key(model: &mut Model, key: KeyEvent) -> Option<Command> {
    match key.code {
        KeyCode::Esc => {
            model.filter.clear();
            model.filter_editing = false;
        }
        KeyCode::Enter => model.filter_editing = false,
        KeyCode::Backspace => {
            model.filter.pop();
        }
        KeyCode::Char(c) if !c.is_control() && model.filter.chars().count() < 64 => {
            model.filter.push(c);
        }
        _ => {}
    }
    model.select_first_if_needed();
    model.list_scroll = 0;
    model.ensure_visible();
    model.tail_command()
}

/// Moves in the focused pane: the selection in the list, the scroll in the detail.
fn step(model: &mut Model, delta: isize) -> Option<Command> {
    match model.focus {
        Pane::List => {
            model.move_selection(delta);
            model.ensure_visible();
            model.tail_command()
        }
        Pane::Detail if model.tail_focus => {
            // Up is back in the log: the scroll counts lines up from the newest.
            let max = tail_max_scroll(model) as isize;
            let current = model.tail_scroll.min(max as usize) as isize;
            model.tail_scroll = current.saturating_sub(delta).clamp(0, max) as usize;
            None
        }
        Pane::Detail => {
            let current = model.detail_scroll.min(detail_max_scroll(model)) as isize;
            let scroll = current.saturating_add(delta);
            model.detail_scroll = scroll.clamp(0, detail_max_scroll(model) as isize) as u16;
            None
        }
    }
}

/// How far the detail can scroll: its wrapped lines past the rows the log tail leaves it.
fn detail_max_scroll(model: &Model) -> u16 {
    let Some(detail) = model.areas().detail else {
        return 0;
    };
    let inner_height = usize::from(detail.height.saturating_sub(2));
    let lines = super::view::detail_lines(model, detail.width).len();
    let tail = super::view::tail_block(model, detail.width).len();
    let (info_rows, _) = super::view::detail_split(model, inner_height, lines, tail);
    lines.saturating_sub(info_rows).min(usize::from(u16::MAX)) as u16
}

/// How far the log tail can scroll up: its lines past the rows it is given, its heading aside.
fn tail_max_scroll(model: &Model) -> usize {
    let Some(detail) = model.areas().detail else {
        return 0;
    };
    let inner_height = usize::from(detail.height.saturating_sub(2));
    let lines = super::view::detail_lines(model, detail.width).len();
    let tail = super::view::tail_block(model, detail.width).len();
    let (_, tail_rows) = super::view::detail_split(model, inner_height, lines, tail);
    tail.saturating_sub(1)
        .saturating_sub(tail_rows.saturating_sub(1))
}

fn page_height(model: &Model) -> usize {
    let areas = model.areas();
    match model.focus {
        Pane::List => areas.list.map(layout::list_inner_height).unwrap_or(1),
        Pane::Detail => areas
            .detail
            .map(|d| usize::from(d.height.saturating_sub(2)))
            .unwrap_or(1),
    }
    .saturating_sub(1)
    .max(1)
}

fn on_mouse(model: &mut Model, mouse: MouseEvent) -> Option<Command> {
    let areas = model.areas();
    let inside = |area: Option<ratatui::layout::Rect>| {
        area.is_some_and(|a| {
            mouse.column >= a.x
                && mouse.column < a.x + a.width
                && mouse.row >= a.y
                && mouse.row < a.y + a.height
        })
    };
    let in_list = inside(areas.list);
    let in_detail = inside(areas.detail);
    match mouse.kind {
        MouseEventKind::ScrollDown | MouseEventKind::ScrollUp => {
            let delta = if mouse.kind == MouseEventKind::ScrollDown {
                1
            } else {
                -1
            };
            if in_detail {
                model.focus = Pane::Detail;
                model.dirty = true;
                step(model, delta * 3)
            } else if in_list {
                model.focus = Pane::List;
                model.dirty = true;
                step(model, delta)
            } else {
                None
            }
        }
        MouseEventKind::Down(MouseButton::Left) if in_list => {
            let list = areas.list?;
            let (start, _, above) = model.list_window()?;
            // Below the top border and the column headers (and the line saying what is above).
            let first = list.y + 2 + u16::from(above);
            let line = usize::from(mouse.row.checked_sub(first)?) + start;
            let clicked = match model.rows().get(line) {
                Some(Row::Job(a)) => Some(Stop {
                    job: a.id.clone(),
                    approval: None,
                    needs_a_human: false,
                }),
                Some(Row::Approval(a, p)) => Some(Stop {
                    job: a.id.clone(),
                    approval: Some(p.key.clone()),
                    needs_a_human: true,
                }),
                _ => None,
            };
            model.focus = Pane::List;
            model.dirty = true;
            if let Some(stop) = clicked
                && !model.at_stop(&stop)
            {
                model.select_stop(Some(&stop));
                return model.tail_command();
            }
            None
        }
        MouseEventKind::Down(MouseButton::Left) if in_detail => {
            model.focus = Pane::Detail;
            model.dirty = true;
            None
        }
        _ => None,
    }
}

/// The rows in view for a list scrolled to `scroll` with `height` lines: the first row, how
/// many, and whether the first line announces what is above (so the head of the list is
/// never silently out of view).
pub fn window(scroll: usize, height: usize) -> (usize, usize, bool) {
    if scroll == 0 || height < 2 {
        (scroll, height, false)
    } else {
        (scroll, height - 1, true)
    }
}

#[cfg(test)]
mod tests {
    use super::Needle;

    fn needle(filter: &str) -> Needle {
        Needle(filter.to_lowercase())
    }

    #[test]
    fn the_filter_is_found_whatever_the_case_with_or_without_ascii() {
        assert!(needle("train").found_in("nightly-TRAIN-07"));
        assert!(needle("TRAIN").found_in("nightly-train-07"));
        assert!(!needle("trains").found_in("nightly-train"));
        assert!(needle("").found_in("anything"));
        assert!(!needle("x").found_in(""));
        // Beyond ASCII, on either side: lower-cased as before.
        assert!(needle("ÜBER").found_in("über-lauf"));
        assert!(needle("lauf").found_in("ÜBER-LAUF"));
        assert!(needle("データ").found_in("収集データ-01"));
        // The Kelvin sign lower-cases to an ASCII 'k'.
        assert!(needle("k").found_in("\u{212A}elvin"));
    }
}

//! The fleet screen's state and its one transition function (The Elm Architecture, as the
//! local dashboard's): every host's latest `check --json --follow` line, or why the host is
//! RED, merged into one action list in the fixed order with a host column.
//!
//! `update` performs no I/O: it never reads a clock (the runtime hands it `now`), never runs
//! ssh and never acts on a job. A confirmed decision leaves it as a [`FleetCommand`] for the
//! runtime, which has the host's own mihari carry it out.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::Value;

use crate::core::PendingApproval;
use crate::core::text::inert;
use crate::probe::zone::Zone;
use crate::tui::chooser::{self, Choices, Chooser, Picked};
use crate::tui::dialog::{self, Answer, Dialog, Proposal};
use crate::tui::theme::Theme;

/// The interval a host's stream is assumed to keep until its first line says its own.
pub const ASSUMED_HEARTBEAT: Duration = Duration::from_secs(30);

/// The shortest interval a host's lines may set: shorter would make a host RED for the
/// scheduling hiccup of a busy machine.
pub const SHORTEST_HEARTBEAT: Duration = Duration::from_millis(250);

/// The longest interval a host's lines may set: a host's `check --json --follow` speaks at
/// least every 30 s, and a host that says it will be quiet for years (`1e9`) must still go
/// RED when it stalls.
pub const LONGEST_HEARTBEAT: Duration = Duration::from_secs(300);

/// One host as the screen knows it.
#[derive(Debug, Clone)]
pub struct HostView {
    pub name: String,
    /// The host's latest line, parsed.
    pub report: Option<Value>,
    /// Why the host is RED now (its stream ended, never started, or went silent); `None`
    /// while its stream delivers.
    pub red: Option<String>,
    /// When its stream last delivered a line (or was started).
    pub heard_at: DateTime<Utc>,
    /// The longest its stream stays silent, as its lines say.
    pub heartbeat: Duration,
    /// Whether a line has been heard since the stream last started.
    pub heard: bool,
    /// Its stream was killed for its silence: the end that follows says nothing new.
    pub silenced: bool,
    /// What the host sent that was out of bounds or cut off, and what was used instead
    /// ("heartbeat_sec '1e13' is out of bounds ...: 300 s used"), each once, the newest
    /// [`MAX_NOTES`] kept; shown under HOSTS at the end of the list.
    pub notes: Vec<String>,
}

impl HostView {
    /// The moment a silence makes this host RED: twice its interval after its last line.
    pub fn silent_after(&self) -> DateTime<Utc> {
        let twice = chrono::Duration::from_std(self.heartbeat.saturating_mul(2))
            .unwrap_or(chrono::Duration::MAX);
        self.heard_at
            .checked_add_signed(twice)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// Keeps `note` once (a host repeats itself on every line).
    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
            // A host that says something new on every line must not grow the screen's memory.
            if self.notes.len() > MAX_NOTES {
                self.notes.remove(0);
            }
        }
    }
}

/// How many notes a host keeps.
const MAX_NOTES: usize = 8;

/// The interval a host's line sets with `heartbeat_sec`, bounded to [`SHORTEST_HEARTBEAT`]
/// ..= [`LONGEST_HEARTBEAT`]: `None` when the line says none, and words when what it said
/// was out of bounds or not a number, with what is used instead (`current` for a value that
/// is no number at all).
pub fn bounded_heartbeat(line: &Value, current: Duration) -> Option<(Duration, Option<String>)> {
    let said = line.get("heartbeat_sec")?;
    let (lo, hi) = (SHORTEST_HEARTBEAT, LONGEST_HEARTBEAT);
    let bounds = format!("{} to {} s", lo.as_secs_f64(), hi.as_secs_f64());
    let quoted = inert(&said.to_string())
        .chars()
        .take(40)
        .collect::<String>();
    let Some(secs) = said.as_f64().filter(|s| s.is_finite()) else {
        return Some((
            current,
            Some(format!(
                "heartbeat_sec '{quoted}' is not a number of seconds ({bounds}): {} s used",
                current.as_secs_f64()
            )),
        ));
    };
    if secs >= lo.as_secs_f64() && secs <= hi.as_secs_f64() {
        return Some((Duration::from_secs_f64(secs), None));
    }
    let used = if secs < lo.as_secs_f64() { lo } else { hi };
    Some((
        used,
        Some(format!(
            "heartbeat_sec '{quoted}' is out of bounds ({bounds}): {} s used",
            used.as_secs_f64()
        )),
    ))
}

/// One line of the merged list.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Heading {
        bucket: Option<&'static str>,
        count: usize,
    },
    /// A host's job: the host's index and the job's object as the host sent it.
    Job { host: usize, job: Value },
    /// A rule of no one job, or a host that is RED, under RED.
    Rule(String),
    /// What a host sent that was out of bounds or cut off, under HOSTS at the end.
    Note(String),
}

impl Row {
    fn key(&self, hosts: &[HostView]) -> Option<(String, String)> {
        match self {
            Row::Job { host, job } => Some((
                hosts[*host].name.clone(),
                job.get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )),
            _ => None,
        }
    }
}

/// What a remote decision asks the host's mihari to do.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteAction {
    Restart,
    Release,
    /// Release the stale marker at this path (as its host names it); `None` for the job's
    /// only stale marker, when its host does not list them (an older mihari).
    ReleaseMarker {
        path: Option<String>,
    },
    Pause,
    Resume,
    Acknowledge,
    /// Approve (or, answered so, deny) the pending approval with this key.
    Approve {
        key: String,
        deny: bool,
    },
}

/// A decision proposed on the fleet screen, carried out by the host's own `mihari ... --yes`.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteDecision {
    pub host: String,
    pub job: String,
    pub action: RemoteAction,
    /// What the host said about the job, for the dialog: its state and why.
    pub lines: Vec<(String, String)>,
    pub reason: String,
}

impl RemoteDecision {
    /// The words after `mihari --config C` on the host: the subcommand and its options, then
    /// `--` and the job (or the approval's key) as plain words, so a key that starts with `-`
    /// (`--help`) is never read as an option there; a reason is one `--reason=...` word.
    pub fn args(&self) -> Vec<String> {
        let reason = || format!("--reason={}", self.reason);
        let (mut args, words): (Vec<String>, Vec<String>) = match &self.action {
            RemoteAction::Restart => (vec!["restart".into()], vec![self.job.clone()]),
            RemoteAction::Release => (vec!["release".into()], vec![self.job.clone()]),
            RemoteAction::ReleaseMarker { path } => (
                vec!["release-marker".into()],
                std::iter::once(self.job.clone())
                    .chain(path.clone())
                    .collect(),
            ),
            RemoteAction::Pause => (vec!["pause".into(), reason()], vec![self.job.clone()]),
            RemoteAction::Resume => (vec!["resume".into()], vec![self.job.clone()]),
            RemoteAction::Acknowledge => (vec!["ack".into(), reason()], vec![self.job.clone()]),
            RemoteAction::Approve { key, deny: false } => {
                (vec!["approval".into(), "approve".into()], vec![key.clone()])
            }
            RemoteAction::Approve { key, deny: true } => (
                vec!["approval".into(), "deny".into(), reason()],
                vec![key.clone()],
            ),
        };
        args.push("--yes".into());
        args.push("--".into());
        args.extend(words);
        args
    }

    /// The line the host's mihari prints first when it takes this decision up
    /// ("approve 'deploy':"): an answer without it (a usage text, say) did not do it.
    pub fn taken_up(&self) -> String {
        format!("{} '{}':", self.verb(), self.job)
    }
}

impl Proposal for RemoteDecision {
    fn verb(&self) -> &str {
        match &self.action {
            RemoteAction::Restart => "restart",
            RemoteAction::Release => "release",
            RemoteAction::ReleaseMarker { .. } => "release marker",
            RemoteAction::Pause => "pause",
            RemoteAction::Resume => "resume",
            RemoteAction::Acknowledge => "acknowledge",
            RemoteAction::Approve { deny: false, .. } => "approve",
            RemoteAction::Approve { deny: true, .. } => "deny",
        }
    }

    fn job(&self) -> &str {
        &self.job
    }

    fn describe(&self, _now: DateTime<Utc>) -> Vec<(String, String)> {
        let mut lines = vec![("host".to_string(), self.host.clone())];
        lines.extend(self.lines.iter().cloned());
        lines.push((
            "runs".to_string(),
            format!(
                "mihari {} on '{}' (over its ssh, when the fleet file gives one); the host's \
                 own rules decide, and its event log records you and this machine",
                self.args().join(" "),
                self.host
            ),
        ));
        lines
    }

    fn needs_reason(&self) -> bool {
        matches!(self.action, RemoteAction::Pause | RemoteAction::Acknowledge)
    }

    fn is_approval(&self) -> bool {
        matches!(self.action, RemoteAction::Approve { .. })
    }

    fn answered(mut self, deny: bool, reason: &str) -> Self {
        if let RemoteAction::Approve { deny: denied, .. } = &mut self.action {
            *denied = deny;
            self.reason = if reason.trim().is_empty() {
                "denied from the fleet screen".to_string()
            } else {
                reason.trim().to_string()
            };
        } else {
            self.reason = reason.trim().to_string();
        }
        self
    }
}

/// The remote job's log tail and events, as its host answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Remote {
    pub host: String,
    pub job: String,
    /// Lines (each made inert again here), or why there are none.
    pub lines: Result<Vec<String>, String>,
}

/// Everything the fleet screen shows.
#[derive(Debug, Clone)]
pub struct FleetModel {
    pub now: DateTime<Utc>,
    pub hosts: Vec<HostView>,
    /// The selected job: (host, id).
    pub selected: Option<(String, String)>,
    pub list_scroll: usize,
    /// The detail pane (with the log tail) is open.
    pub detail: bool,
    pub tail: Option<Remote>,
    /// A tail is being asked for; one more is asked when it comes if the host said more meanwhile.
    pub tail_asked: bool,
    pub tail_stale: bool,
    /// The event log of the selected job, when open (`e`).
    pub events: Option<Remote>,
    pub dialog: Option<Dialog<RemoteDecision>>,
    /// The chooser among a job's pending approvals or stale markers, if open (the local
    /// dashboard's own): it takes every key.
    pub chooser: Option<Chooser>,
    /// The host of the chooser's job.
    pub chooser_host: String,
    pub status: Option<String>,
    pub help: bool,
    pub size: (u16, u16),
    pub theme: Theme,
    pub zone: Zone,
    pub dirty: bool,
    pub quit: bool,
}

/// What can happen to the fleet screen.
#[derive(Debug, Clone)]
pub enum FleetMsg {
    Key(KeyEvent),
    Resize(u16, u16),
    /// A host's stream delivered a line at `at`.
    Line {
        host: usize,
        line: String,
        at: DateTime<Utc>,
    },
    /// A host's stream ended or could not start.
    Ended {
        host: usize,
        why: String,
    },
    /// A host's stream goes on but sent more than is kept.
    Note {
        host: usize,
        note: String,
    },
    /// A host's stream said nothing past twice its interval (the runtime kills it).
    Silent {
        host: usize,
        at: DateTime<Utc>,
    },
    Tail(Remote),
    Events(Remote),
    /// What became of a remote decision, in words.
    Outcome(String),
}

/// What `update` asks the runtime to do.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetCommand {
    Quit,
    /// Ask `host` for `job`'s log tail (`mihari show JOB --json`).
    LoadTail {
        host: String,
        job: String,
    },
    /// Ask `host` for `job`'s events (`mihari events --json --job JOB`).
    LoadEvents {
        host: String,
        job: String,
    },
    /// Have the host's mihari carry out a confirmed decision.
    Execute(RemoteDecision),
    /// Kill the stream of this host (it went silent); it restarts with its backoff.
    KillStream(usize),
}

const BUCKETS: [&str; 4] = ["RESTART", "RED", "STALE", "DISPATCH"];

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

impl FleetModel {
    pub fn new(names: Vec<String>, theme: Theme, now: DateTime<Utc>) -> Self {
        FleetModel {
            now,
            hosts: names
                .into_iter()
                .map(|name| HostView {
                    name,
                    report: None,
                    red: None,
                    heard_at: now,
                    heartbeat: ASSUMED_HEARTBEAT,
                    heard: false,
                    silenced: false,
                    notes: Vec::new(),
                })
                .collect(),
            selected: None,
            list_scroll: 0,
            detail: false,
            tail: None,
            tail_asked: false,
            tail_stale: false,
            events: None,
            dialog: None,
            chooser: None,
            chooser_host: String::new(),
            status: None,
            help: false,
            size: (80, 24),
            theme,
            zone: Zone::Utc,
            dirty: true,
            quit: false,
        }
    }

    /// The rules under RED: every RED host, then each host's own rules, named by host.
    pub fn rules(&self) -> Vec<String> {
        let mut rules = Vec::new();
        for host in &self.hosts {
            if let Some(why) = &host.red {
                rules.push(format!("{}: {why}", host.name));
            }
        }
        for host in &self.hosts {
            for rule in host
                .report
                .as_ref()
                .and_then(|r| r.get("rules"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                rules.push(format!("{}: {rule}", host.name));
            }
        }
        rules
    }

    /// Every job of every host that is not RED for its stream, in the fixed order: bucket,
    /// paused last among the rest, then the fleet file's order of hosts, then each host's.
    pub fn jobs(&self) -> Vec<(usize, &Value)> {
        let mut jobs: Vec<(usize, bool, usize, usize, &Value)> = Vec::new();
        for (h, host) in self.hosts.iter().enumerate() {
            let Some(report) = &host.report else { continue };
            for (i, job) in report
                .get("jobs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let rank = BUCKETS
                    .iter()
                    .position(|b| *b == text(job, "bucket"))
                    .unwrap_or(BUCKETS.len());
                jobs.push((rank, text(job, "state") == "PAUSED", h, i, job));
            }
        }
        jobs.sort_by_key(|(rank, paused, h, i, _)| (*rank, *paused, *h, *i));
        jobs.into_iter().map(|(.., h, _, job)| (h, job)).collect()
    }

    /// The list's lines: a heading per bucket that has any, RED's rules first under RED.
    pub fn rows(&self) -> Vec<Row> {
        let rules = self.rules();
        let jobs = self.jobs();
        let mut rows = Vec::new();
        let in_bucket = |bucket: Option<&'static str>| {
            jobs.iter()
                .filter(move |(_, job)| match bucket {
                    Some(b) => text(job, "bucket") == b,
                    None => !BUCKETS.contains(&text(job, "bucket")),
                })
                .map(|(h, job)| Row::Job {
                    host: *h,
                    job: (*job).clone(),
                })
        };
        for bucket in BUCKETS {
            let of_bucket: Vec<Row> = in_bucket(Some(bucket)).collect();
            let extra = if bucket == "RED" { rules.len() } else { 0 };
            if of_bucket.len() + extra == 0 {
                continue;
            }
            rows.push(Row::Heading {
                bucket: Some(bucket),
                count: of_bucket.len() + extra,
            });
            if bucket == "RED" {
                rows.extend(rules.iter().cloned().map(Row::Rule));
            }
            rows.extend(of_bucket);
        }
        let rest: Vec<Row> = in_bucket(None).collect();
        if !rest.is_empty() {
            rows.push(Row::Heading {
                bucket: None,
                count: rest.len(),
            });
            rows.extend(rest);
        }
        let notes: Vec<Row> = self
            .hosts
            .iter()
            .flat_map(|host| {
                host.notes
                    .iter()
                    .map(|note| Row::Note(format!("{}: {note}", host.name)))
            })
            .collect();
        if !notes.is_empty() {
            rows.push(Row::Heading {
                bucket: Some("HOSTS"),
                count: notes.len(),
            });
            rows.extend(notes);
        }
        rows
    }

    /// The selected job's host index and object.
    pub fn selected_job(&self) -> Option<(usize, Value)> {
        let (host, id) = self.selected.as_ref()?;
        self.job_of(host, id)
    }

    /// Job `id` of host `host` as its latest line says it: the host's index and the object.
    fn job_of(&self, host: &str, id: &str) -> Option<(usize, Value)> {
        let h = self.hosts.iter().position(|v| v.name == host)?;
        let job = self.hosts[h]
            .report
            .as_ref()?
            .get("jobs")?
            .as_array()?
            .iter()
            .find(|job| text(job, "id") == id)?
            .clone();
        Some((h, job))
    }

    /// The earliest moment a host goes silent: the one timer the runtime sets.
    pub fn next_silence(&self) -> Option<DateTime<Utc>> {
        self.hosts
            .iter()
            .filter(|h| h.red.is_none())
            .map(HostView::silent_after)
            .min()
    }

    fn keys(&self) -> Vec<(String, String)> {
        let rows = self.rows();
        rows.iter().filter_map(|r| r.key(&self.hosts)).collect()
    }

    fn move_selection(&mut self, delta: isize) -> Option<FleetCommand> {
        let keys = self.keys();
        if keys.is_empty() {
            return None;
        }
        let at = self
            .selected
            .as_ref()
            .and_then(|s| keys.iter().position(|k| k == s))
            .unwrap_or(0) as isize;
        let next = (at + delta).clamp(0, keys.len() as isize - 1) as usize;
        self.selected = Some(keys[next].clone());
        self.ensure_visible();
        self.dirty = true;
        self.tail_command(false)
    }

    fn ensure_visible(&mut self) {
        let rows = self.rows();
        let Some(sel) = &self.selected else { return };
        let Some(at) = rows
            .iter()
            .position(|r| r.key(&self.hosts).as_ref() == Some(sel))
        else {
            return;
        };
        let height = usize::from(self.list_height()).max(1);
        if at < self.list_scroll {
            self.list_scroll = at.saturating_sub(1);
        } else if at >= self.list_scroll + height {
            self.list_scroll = at + 1 - height;
        }
    }

    /// The list's inner height on screen (see the view's split).
    pub fn list_height(&self) -> u16 {
        let body = self.size.1.saturating_sub(2);
        if self.detail { body / 2 } else { body }.saturating_sub(2)
    }

    /// Asks for the selected job's tail when the detail is open and it is not loaded yet.
    fn tail_command(&mut self, again: bool) -> Option<FleetCommand> {
        if !self.detail {
            return None;
        }
        let (host, job) = self.selected.clone()?;
        let loaded = self
            .tail
            .as_ref()
            .is_some_and(|t| t.host == host && t.job == job);
        if loaded && !again {
            return None;
        }
        if !loaded {
            self.tail = None;
        }
        // One ask at a time per screen: a chatty host's lines never pile up ssh runs.
        if self.tail_asked {
            self.tail_stale = true;
            return None;
        }
        self.tail_asked = true;
        Some(FleetCommand::LoadTail { host, job })
    }

    /// The selected job's host index and object, or a word on the status line.
    fn selected_or_say(&mut self) -> Option<(usize, Value)> {
        let selected = self.selected_job();
        if selected.is_none() {
            self.status = Some("select a job first".to_string());
            self.dirty = true;
        }
        selected
    }

    /// `a`: the job's only pending approval in the dialog; several, the chooser first.
    fn approve(&mut self) -> Option<FleetCommand> {
        let (h, job) = self.selected_or_say()?;
        let approvals: Vec<PendingApproval> = job
            .get("approvals")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|a| pending_approval(a, self.now))
            .collect();
        match approvals.as_slice() {
            [] => {
                self.status = Some(format!(
                    "'{}' on '{}' has no pending approval",
                    inert(text(&job, "id")),
                    self.hosts[h].name
                ));
                self.dirty = true;
                None
            }
            [only] => {
                let key = only.key.clone();
                self.propose(h, &job, RemoteAction::Approve { key, deny: false })
            }
            _ => self.choose(h, &job, Choices::Approvals(approvals)),
        }
    }

    /// `M`: the job's only stale marker in the dialog, named by its path; several, the
    /// chooser first (the host refuses a bare release of one of several).
    fn release_marker(&mut self) -> Option<FleetCommand> {
        let (h, job) = self.selected_or_say()?;
        let markers = stale_markers(&job);
        match markers.as_slice() {
            [] => self.propose(h, &job, RemoteAction::ReleaseMarker { path: None }),
            [(path, _)] => {
                let path = Some(path.display().to_string());
                self.propose(h, &job, RemoteAction::ReleaseMarker { path })
            }
            _ => self.choose(h, &job, Choices::Markers(markers)),
        }
    }

    fn choose(&mut self, h: usize, job: &Value, choices: Choices) -> Option<FleetCommand> {
        self.chooser = Some(Chooser {
            job: text(job, "id").to_string(),
            choices,
            at: 0,
        });
        self.chooser_host = self.hosts[h].name.clone();
        self.dirty = true;
        None
    }

    /// What the operator picked in the chooser, proposed in the dialog — if the job and
    /// what was picked are still there as its host last said.
    fn picked(&mut self, picked: Picked) -> Option<FleetCommand> {
        if picked == Picked::Open {
            return None;
        }
        let host = std::mem::take(&mut self.chooser_host);
        let (job_id, action, what) = match picked {
            Picked::Open | Picked::Closed => return None,
            Picked::Quit => {
                self.quit = true;
                return Some(FleetCommand::Quit);
            }
            Picked::Approval { job, key } => {
                let what = format!("approval '{}'", inert(&key));
                (job, RemoteAction::Approve { key, deny: false }, what)
            }
            Picked::Marker { job, path } => {
                let path = path.display().to_string();
                let what = format!("marker '{}'", inert(&path));
                (job, RemoteAction::ReleaseMarker { path: Some(path) }, what)
            }
        };
        let found = self.job_of(&host, &job_id);
        let still = found.filter(|(_, job)| match &action {
            RemoteAction::Approve { key, .. } => job
                .get("approvals")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|a| text(a, "key") == key)),
            RemoteAction::ReleaseMarker { path: Some(path) } => stale_markers(job)
                .iter()
                .any(|(p, _)| p.display().to_string() == *path),
            _ => true,
        });
        let Some((h, job)) = still else {
            self.status = Some(format!(
                "{what} of '{}' on '{}' is no longer there: its host changed meanwhile; \
                 nothing was sent",
                inert(&job_id),
                inert(&host)
            ));
            self.dirty = true;
            return None;
        };
        self.propose(h, &job, action)
    }

    fn propose_selected(&mut self, action: RemoteAction) -> Option<FleetCommand> {
        let (h, job) = self.selected_or_say()?;
        self.propose(h, &job, action)
    }

    /// Opens the confirmation dialog for `action` on `job` of host `h`, with what its host
    /// said about it.
    fn propose(&mut self, h: usize, job: &Value, action: RemoteAction) -> Option<FleetCommand> {
        let mut lines = vec![(
            "state".to_string(),
            format!("{} ({})", text(job, "state"), {
                let b = text(job, "bucket");
                if b.is_empty() { "no action" } else { b }
            }),
        )];
        for reason in job
            .get("reasons")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            lines.push(("why".to_string(), reason.to_string()));
        }
        let action = match action {
            RemoteAction::Approve { key, deny } => {
                let approvals: Vec<&Value> = job
                    .get("approvals")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .collect();
                if let Some(chosen) = approvals.iter().find(|a| text(a, "key") == key) {
                    lines.push(("step".to_string(), text(chosen, "step").to_string()));
                    lines.push(("summary".to_string(), text(chosen, "summary").to_string()));
                    // Said in UTC here; the dialog shows it in local time like every stamp.
                    let by = text(chosen, "requested_by");
                    let at = text(chosen, "requested_at");
                    let at = DateTime::parse_from_rfc3339(at).map_or_else(
                        |_| at.to_string(),
                        |at| {
                            at.with_timezone(&Utc)
                                .format("%Y-%m-%d %H:%M:%S UTC")
                                .to_string()
                        },
                    );
                    lines.push((
                        "asked by".to_string(),
                        format!("{}, {at}", if by.is_empty() { "—" } else { by }),
                    ));
                }
                if approvals.len() > 1 {
                    lines.push((
                        "note".to_string(),
                        format!(
                            "one of {} pending approvals, chosen; the others stay pending",
                            approvals.len()
                        ),
                    ));
                }
                RemoteAction::Approve { key, deny }
            }
            RemoteAction::ReleaseMarker { path } => {
                let markers = stale_markers(job);
                if let Some(path) = &path
                    && let Some((_, words)) = markers
                        .iter()
                        .find(|(p, _)| p.display().to_string() == *path)
                {
                    lines.push(("marker".to_string(), words.clone()));
                }
                if markers.len() > 1 {
                    lines.push((
                        "note".to_string(),
                        format!(
                            "one of {} stale markers, chosen; the others stay",
                            markers.len()
                        ),
                    ));
                }
                RemoteAction::ReleaseMarker { path }
            }
            RemoteAction::Pause if job.get("paused").is_some_and(|p| !p.is_null()) => {
                RemoteAction::Resume
            }
            other => other,
        };
        self.dialog = Some(Dialog::new(RemoteDecision {
            host: self.hosts[h].name.clone(),
            job: text(job, "id").to_string(),
            action,
            lines,
            reason: String::new(),
        }));
        self.dirty = true;
        None
    }
}

/// A pending approval as its host's `check --json` lists it, for the chooser; a time that
/// cannot be read is taken as `now`.
fn pending_approval(approval: &Value, now: DateTime<Utc>) -> PendingApproval {
    PendingApproval {
        key: text(approval, "key").to_string(),
        step: inert(text(approval, "step")),
        summary: inert(text(approval, "summary")),
        requested: DateTime::parse_from_rfc3339(text(approval, "requested_at"))
            .map_or(now, |at| at.with_timezone(&Utc)),
        requested_by: approval
            .get("requested_by")
            .and_then(Value::as_str)
            .map(inert),
    }
}

/// A job's stale markers as its host's `check --json` lists them: each path and the
/// judgment in words, in the job's `markers:` order (none from a host that does not say).
fn stale_markers(job: &Value) -> Vec<(std::path::PathBuf, String)> {
    job.get("stale_markers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| !text(m, "path").is_empty())
        .map(|m| (text(m, "path").into(), inert(text(m, "words"))))
        .collect()
}

/// The one transition function.
pub fn update(model: &mut FleetModel, msg: FleetMsg) -> Option<FleetCommand> {
    match msg {
        FleetMsg::Key(key) if key.kind != KeyEventKind::Release => on_key(model, key),
        FleetMsg::Key(_) => None,
        FleetMsg::Resize(w, h) => {
            model.size = (w, h);
            model.dirty = true;
            None
        }
        FleetMsg::Line { host, line, at } => {
            let view = model.hosts.get_mut(host)?;
            let Ok(report) = serde_json::from_str::<Value>(&line) else {
                return None;
            };
            if !report.get("jobs").is_some_and(Value::is_array) {
                return None;
            }
            if let Some((every, note)) = bounded_heartbeat(&report, view.heartbeat) {
                view.heartbeat = every;
                if let Some(note) = note {
                    view.note(note);
                }
            }
            view.report = Some(report);
            view.red = None;
            view.heard = true;
            view.heard_at = at;
            model.now = at;
            model.dirty = true;
            if model.selected.is_none() {
                model.selected = model.keys().into_iter().next();
            }
            // A new line of the selected job's host may mean new log lines.
            let selected_here = model
                .selected
                .as_ref()
                .is_some_and(|(h, _)| *h == model.hosts[host].name);
            if selected_here {
                return model.tail_command(true);
            }
            None
        }
        FleetMsg::Ended { host, why } => {
            if let Some(view) = model.hosts.get_mut(host) {
                // A stream killed for its silence stays "silent for N s", not "killed"; the
                // ends of the streams started after it say why they end.
                if !std::mem::take(&mut view.silenced) {
                    view.red = Some(why);
                }
                view.report = None;
                view.heard = false;
                model.dirty = true;
            }
            None
        }
        FleetMsg::Note { host, note } => {
            model.hosts.get_mut(host)?.note(note);
            model.dirty = true;
            None
        }
        FleetMsg::Silent { host, at } => {
            let view = model.hosts.get_mut(host)?;
            let secs = (at - view.heard_at).num_seconds().max(0);
            view.red = Some(format!("silent for {secs} s"));
            view.report = None;
            view.heard = false;
            view.silenced = true;
            model.now = at;
            model.dirty = true;
            Some(FleetCommand::KillStream(host))
        }
        FleetMsg::Tail(tail) => {
            model.tail_asked = false;
            let current = model.selected.as_ref() == Some(&(tail.host.clone(), tail.job.clone()));
            if current {
                model.tail = Some(tail);
                model.dirty = true;
            }
            if std::mem::take(&mut model.tail_stale) || !current {
                return model.tail_command(true);
            }
            None
        }
        FleetMsg::Events(events) => {
            if model.events.is_some() {
                model.events = Some(events);
                model.dirty = true;
            }
            None
        }
        FleetMsg::Outcome(words) => {
            model.status = Some(words);
            model.dirty = true;
            None
        }
    }
}

fn on_key(model: &mut FleetModel, key: KeyEvent) -> Option<FleetCommand> {
    if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
        model.quit = true;
        return Some(FleetCommand::Quit);
    }
    model.dirty = true;
    if model.dialog.is_some() {
        return match dialog::on_key(&mut model.dialog, &mut model.status, key) {
            Answer::Open => None,
            Answer::Decline(decision) => {
                model.status = Some(format!(
                    "{} '{}' on '{}' cancelled: nothing was sent to the host",
                    decision.verb(),
                    inert(&decision.job),
                    decision.host
                ));
                None
            }
            Answer::Execute(decision) => Some(FleetCommand::Execute(decision)),
        };
    }
    if model.chooser.is_some() {
        let picked = chooser::on_key(&mut model.chooser, &mut model.status, key);
        return model.picked(picked);
    }
    if model.help {
        model.help = false;
        return None;
    }
    model.status = None;
    if model.events.is_some() {
        if matches!(key.code, KeyCode::Esc | KeyCode::Char('e' | 'q')) {
            model.events = None;
        }
        return None;
    }
    match key.code {
        KeyCode::Char('q') => {
            model.quit = true;
            Some(FleetCommand::Quit)
        }
        KeyCode::Char('?') => {
            model.help = true;
            None
        }
        KeyCode::Down | KeyCode::Char('j') => model.move_selection(1),
        KeyCode::Up | KeyCode::Char('k') => model.move_selection(-1),
        KeyCode::PageDown => model.move_selection(model.list_height() as isize),
        KeyCode::PageUp => model.move_selection(-(model.list_height() as isize)),
        KeyCode::Home | KeyCode::Char('g') => model.move_selection(isize::MIN / 2),
        KeyCode::End | KeyCode::Char('G') => model.move_selection(isize::MAX / 2),
        KeyCode::Enter | KeyCode::Char('l') => {
            model.detail = !model.detail;
            model.ensure_visible();
            model.tail_command(false)
        }
        KeyCode::Esc => {
            model.detail = false;
            None
        }
        KeyCode::Char('e') => {
            let (host, job) = model.selected.clone()?;
            model.events = Some(Remote {
                host: host.clone(),
                job: job.clone(),
                lines: Ok(Vec::new()),
            });
            Some(FleetCommand::LoadEvents { host, job })
        }
        KeyCode::Char('r') => model.propose_selected(RemoteAction::Restart),
        KeyCode::Char('x') => model.propose_selected(RemoteAction::Release),
        KeyCode::Char('M') => model.release_marker(),
        KeyCode::Char('p') => model.propose_selected(RemoteAction::Pause),
        KeyCode::Char('K') => model.propose_selected(RemoteAction::Acknowledge),
        KeyCode::Char('a') => model.approve(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(heartbeat: f64, state: &str, bucket: Option<&str>) -> String {
        serde_json::json!({
            "jobs": [{"id": "work", "state": state, "bucket": bucket, "reasons": []}],
            "rules": [],
            "heartbeat_sec": heartbeat,
        })
        .to_string()
    }

    #[test]
    fn a_host_learns_its_interval_from_its_lines_and_is_red_when_silent_past_twice_it() {
        let start = Utc::now();
        let mut model = FleetModel::new(vec!["a".into(), "b".into()], Theme::plain(), start);
        // Before any line, the interval is assumed; the first line says its own.
        assert_eq!(model.hosts[0].heartbeat, ASSUMED_HEARTBEAT);
        update(
            &mut model,
            FleetMsg::Line {
                host: 0,
                line: line(0.5, "RUNNING", None),
                at: start,
            },
        );
        assert_eq!(model.hosts[0].heartbeat, Duration::from_millis(500));
        assert_eq!(
            model.next_silence(),
            Some(start + chrono::Duration::seconds(1))
        );
        let later = start + chrono::Duration::seconds(65);
        let command = update(&mut model, FleetMsg::Silent { host: 0, at: later });
        assert_eq!(command, Some(FleetCommand::KillStream(0)));
        assert_eq!(model.rules(), ["a: silent for 65 s"]);
        // Its stream, killed, ends: the host stays RED for its silence, never dropped.
        update(
            &mut model,
            FleetMsg::Ended {
                host: 0,
                why: "stream ended (killed)".into(),
            },
        );
        assert_eq!(model.rules(), ["a: silent for 65 s"]);
        // The stream started after it says why it ends, in its own words.
        update(
            &mut model,
            FleetMsg::Ended {
                host: 0,
                why: "stream ended: ssh said: Connection timed out".into(),
            },
        );
        assert_eq!(
            model.rules(),
            ["a: stream ended: ssh said: Connection timed out"]
        );
        update(
            &mut model,
            FleetMsg::Ended {
                host: 1,
                why: "stream ended: ssh said: Connection refused".into(),
            },
        );
        assert_eq!(
            model.rows()[0],
            Row::Heading {
                bucket: Some("RED"),
                count: 2
            }
        );
        // Back when its stream is.
        update(
            &mut model,
            FleetMsg::Line {
                host: 0,
                line: line(0.5, "DEAD_LOCK_STALE", Some("RESTART")),
                at: later,
            },
        );
        assert_eq!(
            model.rules(),
            ["b: stream ended: ssh said: Connection refused"]
        );
        assert_eq!(
            model.rows()[0],
            Row::Heading {
                bucket: Some("RESTART"),
                count: 1
            }
        );
    }

    /// A host that says it speaks once in 31 years (`1e9`) is still RED when it stalls:
    /// twice the longest interval after its last line, never later.
    #[test]
    fn a_host_stalled_after_saying_an_unbounded_interval_goes_silent_within_the_bound() {
        let start = Utc::now();
        let mut model = FleetModel::new(vec!["a".into()], Theme::plain(), start);
        for said in [1e9, 1e13, 1e300] {
            update(
                &mut model,
                FleetMsg::Line {
                    host: 0,
                    line: line(said, "RUNNING", None),
                    at: start,
                },
            );
            assert_eq!(model.hosts[0].heartbeat, LONGEST_HEARTBEAT);
            assert_eq!(
                model.next_silence(),
                Some(start + chrono::Duration::seconds(600))
            );
        }
        assert_eq!(model.hosts[0].notes.len(), 3, "{:?}", model.hosts[0].notes);
    }

    /// Approving a colleague's step is another decision than approving one's own: the
    /// fleet's dialog says who asked, as the local one does.
    #[test]
    fn the_approve_dialog_says_who_asked_on_the_host() {
        let start = Utc::now();
        let mut model = FleetModel::new(vec!["gpu1".into()], Theme::plain(), start);
        update(&mut model, FleetMsg::Resize(120, 40));
        let line = serde_json::json!({
            "jobs": [{"id": "deploy", "state": "RUNNING", "bucket": null, "reasons": [],
                      "approvals": [{"key": "k1", "step": "drop", "summary": "drop the table",
                                     "requested_at": "2026-12-01T07:08:09.000Z",
                                     "requested_by": "alice"}]}],
            "rules": [],
            "heartbeat_sec": 30.0,
        })
        .to_string();
        update(
            &mut model,
            FleetMsg::Line {
                host: 0,
                line,
                at: start,
            },
        );
        update(
            &mut model,
            FleetMsg::Key(crossterm::event::KeyEvent::from(KeyCode::Char('a'))),
        );
        let dialog = model.dialog.as_ref().expect("the approve dialog opens");
        assert!(
            dialog.decision.lines.contains(&(
                "asked by".to_string(),
                "alice, 2026-12-01 07:08:09 UTC".to_string()
            )),
            "{:?}",
            dialog.decision.lines
        );
    }

    #[test]
    fn a_confirmed_remote_decision_is_the_hosts_own_command_with_yes() {
        let decision = RemoteDecision {
            host: "gpu1".into(),
            job: "train".into(),
            action: RemoteAction::Approve {
                key: "k1".into(),
                deny: false,
            },
            lines: Vec::new(),
            reason: String::new(),
        };
        let denied = decision.clone().answered(true, "  not today ");
        assert_eq!(
            denied.args(),
            [
                "approval",
                "deny",
                "--reason=not today",
                "--yes",
                "--",
                "k1"
            ]
        );
        assert_eq!(
            decision.answered(false, "").args(),
            ["approval", "approve", "--yes", "--", "k1"]
        );
    }

    fn key(code: KeyCode) -> FleetMsg {
        FleetMsg::Key(crossterm::event::KeyEvent::from(code))
    }

    fn one_job(job: Value) -> FleetModel {
        let start = Utc::now();
        let mut model = FleetModel::new(vec!["gpu1".into()], Theme::plain(), start);
        update(&mut model, FleetMsg::Resize(120, 40));
        let line = serde_json::json!({"jobs": [job], "rules": [], "heartbeat_sec": 30.0});
        update(
            &mut model,
            FleetMsg::Line {
                host: 0,
                line: line.to_string(),
                at: start,
            },
        );
        model
    }

    /// Two questions wait on the host: `a` asks which first, as the dashboard does, and the
    /// one picked — not the oldest — is what the dialog proposes.
    #[test]
    fn several_pending_approvals_open_the_chooser_and_the_one_picked_is_proposed() {
        let mut model = one_job(serde_json::json!({
            "id": "deploy", "state": "RUNNING", "bucket": null, "reasons": [],
            "approvals": [
                {"key": "k1", "step": "drop", "summary": "drop the table",
                 "requested_at": "2026-12-01T07:08:09.000Z", "requested_by": "alice"},
                {"key": "k2", "step": "publish", "summary": "push v2",
                 "requested_at": "2026-12-01T07:09:00.000Z", "requested_by": "bob"},
            ],
        }));
        update(&mut model, key(KeyCode::Char('a')));
        let chooser = model.chooser.as_ref().expect("the chooser opens");
        assert_eq!(chooser.len(), 2);
        assert!(model.dialog.is_none(), "no dialog before a pick");
        // Esc decides nothing.
        update(&mut model, key(KeyCode::Esc));
        assert!(model.chooser.is_none() && model.dialog.is_none());
        assert_eq!(
            model.status.as_deref(),
            Some("no approval chosen: nothing was decided")
        );
        update(&mut model, key(KeyCode::Char('a')));
        update(&mut model, key(KeyCode::Down));
        assert!(model.chooser.is_some(), "moving keeps it open");
        update(&mut model, key(KeyCode::Enter));
        assert!(model.chooser.is_none());
        let dialog = model
            .dialog
            .as_ref()
            .expect("the dialog for the one picked");
        assert_eq!(
            dialog.decision.action,
            RemoteAction::Approve {
                key: "k2".into(),
                deny: false
            }
        );
        assert!(
            dialog
                .decision
                .lines
                .contains(&("step".to_string(), "publish".to_string())),
            "{:?}",
            dialog.decision.lines
        );
        assert_eq!(
            dialog.decision.args(),
            ["approval", "approve", "--yes", "--", "k2"]
        );
    }

    /// The host refuses a bare `release-marker JOB` when the job has several stale markers:
    /// `M` asks which, and the one picked is released by its path.
    #[test]
    fn several_stale_markers_open_the_chooser_and_the_one_picked_is_released_by_its_path() {
        let marker = |path: &str, words: &str| {
            serde_json::json!({"path": path, "name": path.rsplit('/').next(), "age_sec": 7200.0,
                               "holder": null, "words": words})
        };
        let job = |markers: Vec<Value>| {
            serde_json::json!({"id": "train", "state": "RUNNING", "bucket": "STALE",
                               "reasons": [], "stale_markers": markers})
        };
        let mut model = one_job(job(vec![
            marker("/m/first", "marker '/m/first' is 2 h old"),
            marker("/m/second", "marker '/m/second' is 2 h old"),
        ]));
        update(&mut model, key(KeyCode::Char('M')));
        assert_eq!(model.chooser.as_ref().map(Chooser::len), Some(2));
        update(&mut model, key(KeyCode::Char('2')));
        let dialog = model
            .dialog
            .as_ref()
            .expect("the dialog for the one picked");
        assert_eq!(
            dialog.decision.args(),
            ["release-marker", "--yes", "--", "train", "/m/second"]
        );
        assert!(
            dialog.decision.lines.contains(&(
                "marker".to_string(),
                "marker '/m/second' is 2 h old".to_string()
            )),
            "{:?}",
            dialog.decision.lines
        );
        // A single stale marker goes straight to the dialog, named by its path.
        let mut model = one_job(job(vec![marker("/m/only", "marker '/m/only' is 2 h old")]));
        update(&mut model, key(KeyCode::Char('M')));
        assert!(model.chooser.is_none());
        assert_eq!(
            model.dialog.as_ref().map(|d| d.decision.args()),
            Some(vec![
                "release-marker".to_string(),
                "--yes".into(),
                "--".into(),
                "train".into(),
                "/m/only".into(),
            ])
        );
        // The one picked is gone from the host's last word meanwhile: nothing is proposed.
        let mut model = one_job(job(vec![
            marker("/m/first", "first"),
            marker("/m/second", "second"),
        ]));
        update(&mut model, key(KeyCode::Char('M')));
        let line = serde_json::json!({"jobs": [job(vec![marker("/m/first", "first")])],
                                      "rules": [], "heartbeat_sec": 30.0});
        update(
            &mut model,
            FleetMsg::Line {
                host: 0,
                line: line.to_string(),
                at: Utc::now(),
            },
        );
        update(&mut model, key(KeyCode::Char('2')));
        assert!(model.dialog.is_none());
        assert!(
            model.status.as_deref().is_some_and(
                |s| s.contains("marker '/m/second' of 'train' on 'gpu1' is no longer there")
            ),
            "{:?}",
            model.status
        );
    }
}

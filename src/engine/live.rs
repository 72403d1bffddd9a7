//! The live engine: the event-driven loop's bookkeeping, shared by the dashboard and the
//! machine watcher.
//!
//! [`Live`] owns the [`Engine`] and its [`Triggers`]. It points the triggers at every
//! declared file's folder, at the state store, at the watch lock and at every live holder;
//! sorts what the triggers report into the jobs to gather again; and answers the one
//! question the loop's single timer asks — when can anything change by time alone. It has no
//! loop of its own and does not sleep: each caller runs its own `select!`, with its own
//! inputs (the terminal, signals), and hands what arrived here.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use chrono::{DateTime, Duration, Utc};

use super::triggers::{Sink, Trigger, Triggers};
use super::{CheckResultFor, ConfigChange, DueCheck, Engine, Snapshot, Sources};
use crate::config::{Config, ConfigError};
use crate::core::text::inert;
use crate::store::{Actor, Kind, NewEvent, Store};

/// How often holders that cannot be waited on through a pidfd are looked at again.
const HOLDER_POLL: Duration = Duration::seconds(5);
/// How often the jobs found by their command line are looked for again: a process that
/// starts makes no file event. Their exits are waited on like any holder's.
const PROCESS_POLL: Duration = Duration::seconds(5);
/// How often everything is gathered again while some folder cannot be watched (the inotify
/// watch limit): the fallback is polling, never silence.
const FOLDER_POLL: Duration = Duration::seconds(2);

/// Calls `heard` when one of `kinds` arrives (each kind once: SIGTERM, SIGINT, SIGHUP end a
/// front-end cleanly, and a second one finds it gone). Must run inside the front-end's tokio
/// runtime; a kind that cannot be listened to is skipped.
pub fn on_signals(
    kinds: &[tokio::signal::unix::SignalKind],
    heard: impl Fn() + Clone + Send + 'static,
) {
    for kind in kinds {
        if let Ok(mut stream) = tokio::signal::unix::signal(*kind) {
            let heard = heard.clone();
            tokio::spawn(async move {
                if stream.recv().await.is_some() {
                    heard();
                }
            });
        }
    }
}

/// The least time between two passes that file events ask for: a write storm (a thousand
/// logs written ten times a second) is gathered, judged and drawn at most ten times a second,
/// however many events it makes. What cannot wait — a holder's exit, a key, a signal, a
/// check's result — is never held back by it.
pub const PACE: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a burst of file events is given to finish once its first event arrives after a
/// quiet spell: an editor's save or a rename and a create are one gather, not two.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(15);

/// A storm of jobs writing on is gathered so that its passes take at most one part in this
/// many of a core (2.5 %): each storm pass — gathering what changed, judging, drawing,
/// recording — is followed by this many times its own length before the next one. A pass over
/// a few changed files (a few milliseconds) keeps [`PACE`], ten a second; a storm that changes
/// a thousand logs between two passes, each pass gathering all of them, is gathered two or
/// three times a second instead. Everything is still read and judged at every pass; only how
/// often passes come changes. What cannot wait (an exit, a key) never waits for it, and a
/// lock, a marker or the store changing in a storm is judged at the plain pace.
const STORM_SHARE: u32 = 40;

/// The most time between two passes that a storm's cost can ask for: even a storm on a farm
/// of tens of thousands of jobs is on screen once a second.
const MOST_PACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The loop's batching of its inputs: each batch starts a pass, and a batch of file events
/// alone waits until [`PACE`] (or longer, in a storm: [`STORM_SHARE`]) has passed since the
/// last one began.
#[derive(Debug)]
pub struct Pace {
    /// When the last batch was handed out: its pass began then.
    last: Option<tokio::time::Instant>,
    /// Whether the last batch came early, for something that cannot wait, while file events
    /// in it were still waiting for the pace.
    early: bool,
    /// The least time between two passes for file events, from what the last one cost.
    spacing: std::time::Duration,
    /// When the last batch, early or not, was handed out.
    handed: Option<tokio::time::Instant>,
    /// When the pass running now began, when it is one for changed files: its length, known
    /// when the loop next asks for a batch, sets [`Pace::spacing`].
    files_pass: Option<tokio::time::Instant>,
    /// When the last storm pass began: the next comes [`Pace::spacing`] after it.
    storm: Option<tokio::time::Instant>,
    /// Whether the last batch came, for something else, before the storm's next pass was
    /// due: its pass leaves the storm's files to that pass ([`Arrivals::holding_growth`]).
    holds: bool,
    /// When the pass before the last began, had the last not counted.
    before: Option<tokio::time::Instant>,
    /// Whether the last pass read only the store and did not count for the pace, and whether
    /// the one before it did not either.
    uncounted: (bool, bool),
}

impl Default for Pace {
    fn default() -> Pace {
        Pace {
            last: None,
            early: false,
            spacing: PACE,
            handed: None,
            files_pass: None,
            storm: None,
            holds: false,
            before: None,
            uncounted: (false, false),
        }
    }
}

impl Pace {
    pub fn new() -> Pace {
        Pace::default()
    }

    /// Says whether the pass running now (begun when the last batch was handed out) gathered
    /// a storm: several jobs writing on ([`Live::gathered_storm`]). If it did, its whole
    /// length — measured when the loop next asks for a batch, so drawing and recording count
    /// too — spaces the next pass for jobs writing on alone: [`STORM_SHARE`] times it after
    /// this one began, never sooner than [`PACE`] nor later than [`MOST_PACE`]. Any other
    /// pass (a lock, the store, one job writing on) leaves the spacing as the last storm's; it
    /// holds back nothing but the next storm pass, and only while the last pass is recent.
    pub fn gathered_storm(&mut self, storm: bool) {
        self.files_pass = if storm { self.handed } else { None };
    }

    /// Waits for the first input or `deadline`, whichever comes first, then takes whatever
    /// else has arrived. When every input so far `can_wait` (file events), it waits a moment
    /// more so the burst is one gather — [`COALESCE`] after the first, and no sooner than
    /// [`PACE`] (or what a storm's cost asks for) after the last batch — taking what arrives
    /// meanwhile, and returns at once when
    /// something that cannot wait arrives, or the deadline comes. An empty batch means the
    /// deadline came.
    pub async fn next_batch<T>(
        &mut self,
        inbox: &mut tokio::sync::mpsc::UnboundedReceiver<T>,
        deadline: Option<DateTime<Utc>>,
        can_wait: impl Fn(&T) -> bool,
        may_space: impl Fn(&T) -> bool,
    ) -> Vec<T> {
        if let Some(began) = self.files_pass.take() {
            self.spacing = began
                .elapsed()
                .saturating_mul(STORM_SHARE)
                .clamp(PACE, MOST_PACE);
            self.storm = Some(began);
        }
        let sleep = deadline
            .map(|at| (at - Utc::now()).to_std().unwrap_or_default())
            .unwrap_or(std::time::Duration::from_secs(3600));
        let deadline_at = tokio::time::Instant::now() + sleep;
        let first = tokio::select! {
            input = inbox.recv() => input,
            () = tokio::time::sleep_until(deadline_at) => None,
        };
        let mut batch: Vec<T> = first.into_iter().collect();
        let mut waiting = batch.first().is_some_and(&can_wait);
        if waiting {
            let now = tokio::time::Instant::now();
            // Spaced as a storm's cost asks while every input so far may be; at the plain
            // pace as soon as one may not (a lock in a storm of log writes).
            let mut spaced = batch.iter().all(&may_space);
            // A storm's next pass is due its spacing after the last storm pass, and after any
            // pass no sooner than the pace: passes for other things in between neither
            // hasten it nor put it off.
            let (coalesced, last) = (now + COALESCE, self.last);
            let storm_due = self.storm.map(|began| began + self.spacing);
            let ready_at = |spaced: bool| {
                let paced = last.map_or(now, |last| last + PACE);
                let due = if spaced {
                    storm_due.map_or(paced, |due| due.max(paced))
                } else {
                    paced
                };
                coalesced.max(due).min(deadline_at)
            };
            while waiting {
                while waiting && let Ok(more) = inbox.try_recv() {
                    waiting = can_wait(&more);
                    spaced = spaced && may_space(&more);
                    batch.push(more);
                }
                if !waiting {
                    break;
                }
                tokio::select! {
                    input = inbox.recv() => match input {
                        Some(input) => {
                            waiting = can_wait(&input);
                            spaced = spaced && may_space(&input);
                            batch.push(input);
                        }
                        None => break,
                    },
                    () = tokio::time::sleep_until(ready_at(spaced)) => break,
                }
            }
        }
        while let Ok(more) = inbox.try_recv() {
            batch.push(more);
        }
        // Something that cannot wait came before the pace: it is judged at once, and the pace
        // still counts from the last paced pass, so file events handed back are not put off
        // again and again by a flow of keys or deaths.
        let now = tokio::time::Instant::now();
        self.early =
            !batch.iter().all(&can_wait) && self.last.is_some_and(|last| now < last + PACE);
        self.holds = !batch.iter().all(&may_space)
            && self.storm.is_some_and(|began| now < began + self.spacing);
        self.uncounted = (false, self.uncounted.0);
        self.before = self.last;
        if !self.early {
            self.last = Some(now);
        }
        self.handed = Some(now);
        batch
    }

    /// Whether the last batch came for something else (a lock, the store, an exit) while a
    /// storm's next pass was not yet due: its pass should leave the storm's files to that pass
    /// ([`Arrivals::holding_growth`]), so a storm is gathered at its spacing whatever else
    /// happens meanwhile.
    pub fn holds_growth(&self) -> bool {
        self.holds
    }

    /// Tells the pace what the batch just handed out asks of its pass, once a beat has been
    /// taken out of `arrivals` ([`Live::absorb_beat`]): no pass, or the store alone, does not
    /// count for it ([`Pace::made_no_pass`], [`Pace::read_the_store_only`]). A deadline that
    /// came (`reached`) makes a whole pass, which counts.
    pub fn weigh(&mut self, arrivals: &Arrivals, reached: bool) {
        if reached {
            return;
        }
        if !arrivals.any() {
            self.made_no_pass();
        } else if arrivals.store_only() {
            self.read_the_store_only();
        }
    }

    /// Says that the last batch made no pass at all (a beat taken into the snapshot in hand,
    /// a tick of the screen's clock): it does not count for the pace, nor as a pass in a row.
    pub fn made_no_pass(&mut self) {
        if !self.early {
            self.last = self.before;
        }
        self.uncounted.0 = self.uncounted.1;
    }

    /// Says that the pass of the last batch read only the store: what a watcher recorded
    /// (the watcher's own records too, which come back to it as a change). It does not count
    /// for the pace, so a change that comes right after it is not put off by it: the
    /// watcher's records of one change would otherwise hold up its judgment of the next by
    /// up to the pace. Two such passes in a row count, so no loop of records and reads can
    /// spin.
    pub fn read_the_store_only(&mut self) {
        if !self.early && !self.uncounted.1 {
            self.last = self.before;
            self.uncounted.0 = true;
        }
    }

    /// Whether the last batch came before its file events' time, for something that cannot
    /// wait (a holder's exit): its pass should judge that at once and leave the file events
    /// (hand them back to the inbox) for the next paced pass, so a death in a storm is not
    /// drawn behind a gather of every file the storm touched.
    pub fn came_early(&self) -> bool {
        self.early
    }
}

/// Which changes may wait for a storm's spacing ([`Trigger::may_space`]): a job writing on
/// (a path that feeds only logs and progress, [`Engine::growth_paths`]), and the line counts
/// and readings this process or another keeps beside the store (no job reads them). Anything
/// else — a lock, a marker, the jobs file, the store — is judged at the plain pace.
#[derive(Debug, Default)]
struct Sorting {
    /// The paths that feed only a job writing on, each kept as its hash: a farm of 10,000
    /// jobs has 20,000 of them, 160 KB so rather than megabytes of paths copied again. Two
    /// paths of one hash (one chance in 10^11 at that size) would only space a lock's change
    /// as a log's.
    growth: HashSet<u64>,
    state_dir: PathBuf,
}

impl Sorting {
    fn new<'a>(growth: impl IntoIterator<Item = &'a Path>, state_dir: PathBuf) -> Sorting {
        Sorting {
            growth: growth.into_iter().map(path_hash).collect(),
            state_dir,
        }
    }

    fn grew(&self, path: &Path) -> bool {
        self.growth.contains(&path_hash(path))
    }

    fn may_space(&self, path: &Path) -> bool {
        self.grew(path) || crate::store::counts::is_counts_file(&self.state_dir, path)
    }
}

/// A path's hash, the same in every process and every run.
fn path_hash(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    path.hash(&mut hasher);
    hasher.finish()
}

/// What arrived since the last pass, sorted.
#[derive(Debug, Default)]
pub struct Arrivals {
    /// The jobs to gather again, each with the sources to read ([`Sources::ALL`]: whole).
    touched: HashMap<String, Sources>,
    everything: bool,
    store: bool,
    /// The watch lock changed: taken, let go, or beaten by its watcher's pass (twice a
    /// minute). Only whether a watcher watches is read again, not every job's part of the
    /// store: a farm of 10,000 jobs read it all at every beat.
    watcher: bool,
    folders_moved: bool,
    /// The jobs file was saved (or SIGHUP asked for it): load it again.
    config: bool,
    /// SIGHUP asked for it: the load is recorded even when nothing changed.
    config_asked: bool,
    /// How many of the paths noted feed only a job writing on: more than one is a storm.
    grew: usize,
    /// Leave the paths that feed only a job writing on for the storm's next pass.
    hold_growth: bool,
    checks: Vec<CheckResultFor>,
}

impl Arrivals {
    /// Whether all they ask is to read the store again: what was recorded, nothing of a job.
    pub fn store_only(&self) -> bool {
        self.store
            && self.touched.is_empty()
            && !self.everything
            && !self.folders_moved
            && !self.config
            && self.checks.is_empty()
    }

    /// Arrivals for a batch whose pass leaves a storm's files to the storm's own next pass
    /// when `hold` ([`Pace::holds_growth`]).
    pub fn holding_growth(hold: bool) -> Arrivals {
        Arrivals {
            hold_growth: hold,
            ..Arrivals::default()
        }
    }

    /// Marks `jobs` to be gathered whole.
    fn touch_whole(&mut self, jobs: impl IntoIterator<Item = String>) {
        for job in jobs {
            self.touched.insert(job, Sources::ALL);
        }
    }

    /// Asks for the jobs file to be loaded again (SIGHUP), whether or not it changed.
    pub fn reload(&mut self) {
        self.config = true;
        self.config_asked = true;
    }

    /// Whether anything arrived that calls for a new snapshot.
    pub fn any(&self) -> bool {
        self.everything
            || self.store
            || self.watcher
            || self.folders_moved
            || self.config
            || !self.touched.is_empty()
            || !self.checks.is_empty()
    }
}

/// The engine with its event sources.
pub struct Live {
    pub engine: Engine,
    triggers: Triggers,
    /// The paths the triggers reported changed since the last [`Live::note`] took them: filled
    /// on the triggers' threads, and only the first of them wakes the loop (a storm of writes
    /// is one wake-up and one entry per file, not one message per event).
    changes: Arc<Mutex<HashSet<PathBuf>>>,
    /// Which changes may wait for a storm's spacing: read by the triggers' sink on their
    /// thread.
    sorting: Arc<RwLock<Sorting>>,
    /// The caller's sink: wakes the loop again for changes a pass left to the storm's next.
    rearm: Sink,
    /// The paths whose change is news for every job, the state store's files
    /// ([`Engine::store_paths`]; the watch lock's is news of the watcher alone,
    /// [`Arrivals::watcher`]): a handful, looked through for every path a storm changes, byte
    /// for byte rather than hashed.
    store_paths: Vec<PathBuf>,
    /// The watch lock: its change is news of the watcher.
    watch_lock: PathBuf,
    /// Holders no pidfd could be opened for: looked at every [`HOLDER_POLL`].
    unpolled: Vec<(u32, u64)>,
    next_holder_poll: Option<DateTime<Utc>>,
    /// Folders that could not be watched, with why, from the last time the watches moved.
    pub unwatched: Vec<(PathBuf, String)>,
    /// While some folder is unwatched: when everything is gathered again.
    next_folder_poll: Option<DateTime<Utc>>,
    /// The jobs declared by `process`, and when they are scanned for again.
    process_jobs: Vec<String>,
    next_process_poll: Option<DateTime<Utc>>,
    /// The engine's next deadline for the snapshot judged at this moment: asked on every
    /// wake-up, found by a walk over every job, and unchanged until the next judgment or a
    /// check handed out.
    engine_deadline: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// The jobs file, as given: followed through its folder, so a save by rename (vim,
    /// `sed -i`) and one in place are both seen.
    source: PathBuf,
    /// What each load of the jobs file since the last look came to, for the caller to
    /// record and show.
    reloads: Vec<Reload>,
    /// The refusal last reported, so one save seen twice is reported once.
    last_refusal: Option<ConfigError>,
    /// Whether the last pass gathered a storm: files of more than one job writing on, and
    /// nothing else asked for (not a reload, not everything): what paces the next (see
    /// [`Pace::gathered_storm`]).
    gathered_storm: bool,
}

/// What loading the jobs file again came to.
#[derive(Debug, Clone)]
pub enum Reload {
    /// It loaded and is in force; what changed.
    Loaded(ConfigChange),
    /// It was refused; the last good file stays in force.
    Refused(ConfigError),
}

impl Reload {
    /// The event that records it: `config-reloaded` with the jobs added and removed, or
    /// `config-refused` with file:line:col and why.
    pub fn event(&self, jobs: usize) -> NewEvent {
        match self {
            Reload::Loaded(change) => {
                NewEvent::new(Kind::ConfigReloaded).reason(change.words(jobs))
            }
            Reload::Refused(error) => {
                let name = error
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let at = match error.position {
                    Some((line, column)) => format!("{name}:{line}:{column}"),
                    None => name,
                };
                NewEvent::new(Kind::ConfigRefused).reason(inert(&format!(
                    "{at}: {}; still watching the last good file",
                    error.summary()
                )))
            }
        }
    }
}

impl Live {
    /// Starts the event sources for `config`; their reports go to `sink`.
    pub fn new(config: Config, sink: Sink) -> Result<Live, String> {
        let source = std::path::absolute(&config.source).unwrap_or_else(|_| config.source.clone());
        let engine = Engine::new(config).saying_count_faults().keeping_looks();
        let changes: Arc<Mutex<HashSet<PathBuf>>> = Arc::default();
        let sorting: Arc<RwLock<Sorting>> = Arc::default();
        let rearm = sink.clone();
        let gathering = changes.clone();
        let sorted = sorting.clone();
        let triggers = Triggers::new(Arc::new(move |trigger| match trigger {
            Trigger::Changed(path) => {
                // A job writing on wakes the loop only when nothing else is waiting; any
                // other change always does, so a lock or a marker in a storm of log writes
                // is not held to the storm's spacing.
                let grew = sorted
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .may_space(&path);
                let mut changed = gathering.lock().unwrap_or_else(PoisonError::into_inner);
                let first = changed.is_empty();
                changed.insert(path.clone());
                drop(changed);
                if !grew {
                    sink(Trigger::Changed(path));
                } else if first {
                    sink(Trigger::Grew(path));
                }
            }
            other => sink(other),
        }))?;
        let store_paths = engine.store_paths();
        let watch_lock = engine.watch_lock_path();
        let process_jobs = engine.process_jobs();
        Ok(Live {
            changes,
            sorting,
            rearm,
            process_jobs,
            next_process_poll: None,
            engine,
            triggers,
            store_paths,
            watch_lock,
            unpolled: Vec::new(),
            next_holder_poll: None,
            unwatched: Vec::new(),
            next_folder_poll: None,
            engine_deadline: None,
            source,
            reloads: Vec::new(),
            last_refusal: None,
            gathered_storm: false,
        })
    }

    /// Starts following everything, then gathers everything once. The watches come first:
    /// a lock taken while the first gather reads (`mihari run` started beside `check
    /// --follow` or a watcher) changes once, and a change before the watches were in place
    /// would go unseen for good while the job's log kept the job looking alive and unheld.
    pub fn start(&mut self, now: DateTime<Utc>) -> Snapshot {
        self.follow();
        let mut snapshot = self.engine.refresh(None, now);
        self.follow_holders();
        self.mark(&mut snapshot);
        snapshot
    }

    /// Gathers everything once, following nothing yet: the dashboard's first screen, drawn
    /// before the watches and holder waits of a large farm are set up. [`Live::settle`] must
    /// follow it.
    pub fn first_look(&mut self, now: DateTime<Utc>) -> Snapshot {
        self.engine.refresh(None, now)
    }

    /// Starts following everything after [`Live::first_look`], then gathers everything again:
    /// what changed between the first look and the watches being in place would otherwise go
    /// unseen until it changed once more.
    pub fn settle(&mut self, now: DateTime<Utc>) -> Snapshot {
        self.follow();
        let mut snapshot = self.engine.refresh(None, now);
        self.follow_holders();
        self.mark(&mut snapshot);
        snapshot
    }

    /// Says on the snapshot how many folders are polled instead of watched.
    fn mark(&self, snapshot: &mut Snapshot) {
        snapshot.polled_folders = self.unwatched.len();
        if let Some((folder, error)) = self.unwatched.first() {
            snapshot.notices.insert(
                0,
                format!(
                    "polling {} folder{} every {} s: cannot watch '{}' ({error}); raise \
                     fs.inotify.max_user_watches",
                    self.unwatched.len(),
                    if self.unwatched.len() == 1 { "" } else { "s" },
                    FOLDER_POLL.num_seconds(),
                    folder.display()
                ),
            );
        }
    }

    /// Points the watches at the current files, the store and the holders.
    fn follow(&mut self) {
        let mut paths = self.engine.watched_paths();
        paths.extend(self.store_paths.iter().map(PathBuf::as_path));
        paths.push(&self.watch_lock);
        paths.push(&self.source);
        self.unwatched = self.triggers.watch_paths(&paths);
        *self.sorting.write().unwrap_or_else(PoisonError::into_inner) = Sorting::new(
            self.engine.growth_paths(),
            self.engine.config().settings.state_dir.clone(),
        );
        self.follow_holders();
    }

    /// Waits on the holders seen by the last gather: the paths to watch change only with the
    /// folders (a folder event says so) or the jobs file, the holders with every gather.
    fn follow_holders(&mut self) {
        self.unpolled = self.triggers.watch_holders(&self.engine.live_holders());
        if self.unpolled.is_empty() {
            self.next_holder_poll = None;
        }
    }

    /// Sorts one trigger into `arrivals`. A file change takes every path reported since the
    /// last one: the triggers wake the loop once for all of them.
    pub fn note(&self, arrivals: &mut Arrivals, trigger: Trigger) {
        match trigger {
            Trigger::Changed(path) | Trigger::Grew(path) => {
                let mut changed = std::mem::take(
                    &mut *self.changes.lock().unwrap_or_else(PoisonError::into_inner),
                );
                changed.insert(path);
                let sorting = self.sorting.read().unwrap_or_else(PoisonError::into_inner);
                if arrivals.hold_growth {
                    // Back where the triggers gather them, and the loop woken for them as
                    // for a job writing on: the storm's pass takes them at its time.
                    let (held, now): (HashSet<PathBuf>, HashSet<PathBuf>) =
                        changed.into_iter().partition(|path| sorting.grew(path));
                    changed = now;
                    if let Some(first) = held.iter().next().cloned() {
                        self.changes
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .extend(held);
                        (self.rearm)(Trigger::Grew(first));
                    }
                }
                arrivals.grew += changed.iter().filter(|path| sorting.grew(path)).count();
                drop(sorting);
                for path in changed {
                    self.note_change(arrivals, path);
                }
            }
            Trigger::Rescan => arrivals.everything = true,
            Trigger::HolderExited { pid, .. } => {
                arrivals.touch_whole(self.engine.jobs_held_by(pid));
                if self.engine.watcher_pid() == Some(pid) {
                    arrivals.store = true;
                }
            }
        }
    }

    /// Sorts one changed path into `arrivals`.
    fn note_change(&self, arrivals: &mut Arrivals, path: PathBuf) {
        if self
            .store_paths
            .iter()
            .any(|known| known.as_os_str() == path.as_os_str())
        {
            arrivals.store = true;
            return;
        }
        if path.as_os_str() == self.watch_lock.as_os_str() {
            arrivals.watcher = true;
            return;
        }
        let mut touching = self.engine.sources_touching(&path).peekable();
        let no_job = touching.peek().is_none();
        for (job, sources) in touching {
            *arrivals.touched.entry(job).or_default() |= sources;
        }
        if path == self.source {
            arrivals.config = true;
        } else if no_job
            // The line counts this process (or another) keeps: nothing any job reads. Its temp
            // file, gone once renamed, must not read as a folder that went away (pointing
            // every watch again: at 10,000 jobs, 30,000 paths and a second copy of the routes).
            && !crate::store::counts::is_counts_file(&self.engine.config().settings.state_dir, &path)
            // A folder that appeared or went away may be where a job's files live: point the
            // watches again. Files of no job that still exist need nothing.
            && (path.is_dir() || !path.exists())
        {
            arrivals.folders_moved = true;
        }
    }

    /// Notes a check's result.
    pub fn note_check(&self, arrivals: &mut Arrivals, result: CheckResultFor) {
        arrivals.checks.push(result);
    }

    /// Applies what arrived at `now` — and, when `deadline_reached`, the passing of one of
    /// [`Live::deadline`]'s moments: gathers what was touched, records check results, judges
    /// again. `None` when nothing changed.
    pub fn apply(
        &mut self,
        mut arrivals: Arrivals,
        deadline_reached: bool,
        now: DateTime<Utc>,
    ) -> Option<Snapshot> {
        if self.next_folder_poll.is_some_and(|at| at <= now) {
            // Polling while the watch limit holds: gather everything, and try to watch again.
            self.next_folder_poll = None;
            arrivals.everything = true;
        }
        if self.next_process_poll.is_some_and(|at| at <= now) {
            self.next_process_poll = None;
            arrivals.touch_whole(self.process_jobs.iter().cloned());
        }
        if self.next_holder_poll.is_some_and(|at| at <= now) {
            self.next_holder_poll = None;
            for (pid, _) in &self.unpolled {
                arrivals.touch_whole(self.engine.jobs_held_by(*pid));
            }
        }
        self.gathered_storm = false;
        if !arrivals.any() && !deadline_reached {
            return None;
        }
        self.engine_deadline = None;
        if deadline_reached {
            // The looks at quiet holders that fell due: read before the verdicts they change.
            self.engine.look_at_holders(now);
        }
        if !arrivals.checks.is_empty() {
            self.engine
                .record_checks(std::mem::take(&mut arrivals.checks));
        }
        if arrivals.config {
            match self.reload(arrivals.config_asked) {
                Some(change) if change.everything => arrivals.everything = true,
                Some(change) => {
                    arrivals.touch_whole(change.to_gather());
                    // New files to follow, or some to follow no more.
                    if !(change.added.is_empty()
                        && change.removed.is_empty()
                        && change.changed.is_empty())
                    {
                        arrivals.folders_moved = true;
                    }
                    if arrivals.touched.is_empty() && !arrivals.everything {
                        arrivals.store = true;
                    }
                }
                None => arrivals.store = true,
            }
        }
        // The watches move before the gather, so nothing that changes during it goes unseen.
        let followed = arrivals.folders_moved;
        if followed {
            self.follow();
        }
        let mut snapshot = None;
        if arrivals.store {
            snapshot = Some(self.engine.refresh_store(now));
        } else if arrivals.watcher {
            snapshot = Some(self.engine.refresh_watcher(now));
        }
        if arrivals.everything || !arrivals.touched.is_empty() {
            let only = (!arrivals.everything).then_some(&arrivals.touched);
            snapshot = Some(self.engine.refresh_sources(only, now));
            // Only a storm paces the next pass: one job writing on, a reload or a full gather
            // must not hold back the file events after it.
            self.gathered_storm = only.is_some() && !arrivals.config && arrivals.grew > 1;
            // Lost events: watch again. A folder that appeared or went (or a reload) was
            // followed above, before the gather; a file of a job that changed moves no watch.
            // Either way only the holders the gather found may have changed, and only when it
            // read a lock (a storm of log writes names no new holder).
            if arrivals.everything && !followed {
                self.follow();
            } else if arrivals
                .touched
                .values()
                .any(|sources| sources.intersects(Sources::HOLDERS))
            {
                self.follow_holders();
            }
        }
        let mut snapshot = snapshot.unwrap_or_else(|| self.engine.reassess(now));
        self.mark(&mut snapshot);
        Some(snapshot)
    }

    /// Takes a beat of the same live watcher that changes nothing judged into `held`, the
    /// snapshot in hand, and out of `arrivals`: no pass for it ([`Engine::absorb_beat`]).
    /// With no snapshot in hand, or with the store to read again, the pass reads it.
    pub fn absorb_beat(
        &mut self,
        arrivals: &mut Arrivals,
        held: Option<&mut Snapshot>,
        now: DateTime<Utc>,
    ) {
        if !arrivals.watcher || arrivals.store {
            return;
        }
        let Some(held) = held else {
            return;
        };
        if let Some(status) = self.engine.absorb_beat(now) {
            held.watcher = status;
            arrivals.watcher = false;
        }
    }

    /// Whether the last [`Live::apply`] gathered a storm (files of more than one job writing
    /// on): for [`Pace::gathered_storm`].
    pub fn gathered_storm(&self) -> bool {
        self.gathered_storm
    }

    /// Loads the jobs file again (as just saved: a refusal of a file changed a moment ago is
    /// read again before it stands). A file that loads is put in force (what the jobs it keeps
    /// unchanged have gathered is kept); one that is refused leaves the last good one in
    /// force and says so on every snapshot until a save loads. The outcome is kept for
    /// [`Live::take_reloads`]; the change is returned when the file loaded.
    fn reload(&mut self, asked: bool) -> Option<ConfigChange> {
        match crate::config::load_saved(&self.engine.config().source.clone()) {
            Ok(config) => {
                // An editor's save makes several events; only a load that changes something
                // (or one SIGHUP asked for, or one that ends a refusal) is news.
                let same = config == *self.engine.config();
                let refused = self.last_refusal.take().is_some();
                let change = self.engine.replace_config(config);
                self.store_paths = self.engine.store_paths();
                self.watch_lock = self.engine.watch_lock_path();
                self.process_jobs = self.engine.process_jobs();
                if !same || asked || refused {
                    self.reloads.push(Reload::Loaded(change.clone()));
                }
                Some(change)
            }
            Err(error) => {
                // The same refusal seen again (an editor's second event of one save) is one
                // refusal.
                let repeated = self.last_refusal.as_ref() == Some(&error);
                self.engine.refuse_config(&error);
                if !repeated || asked {
                    self.reloads.push(Reload::Refused(error.clone()));
                }
                self.last_refusal = Some(error);
                None
            }
        }
    }

    /// Records a load of the jobs file in the event log, unless a live watcher follows the
    /// same file and records it itself (one event per save, not one per process watching).
    pub fn record_reload(&self, reload: &Reload) {
        if self.engine.watcher_pid().is_some() {
            return;
        }
        let config = self.engine.config();
        if let Ok(mut store) = Store::open(&config.settings.state_dir, Actor::Operator) {
            let _ = store.append(reload.event(config.jobs.len()));
        }
    }

    /// What each load of the jobs file came to since the last call, oldest first.
    pub fn take_reloads(&mut self) -> Vec<Reload> {
        std::mem::take(&mut self.reloads)
    }

    /// The checks due now, handed out to run in the background.
    pub fn take_due_checks(&mut self, now: DateTime<Utc>) -> Vec<DueCheck> {
        let due = self.engine.take_due_checks(now);
        if !due.is_empty() {
            self.engine_deadline = None;
        }
        due
    }

    /// The next moment anything can change by time alone: a stall or timeout deadline, a
    /// check falling due, or the slow look at holders no pidfd follows.
    pub fn deadline(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.unpolled.is_empty() && self.next_holder_poll.is_none() {
            self.next_holder_poll = Some(now + HOLDER_POLL);
        }
        if !self.unwatched.is_empty() && self.next_folder_poll.is_none() {
            self.next_folder_poll = Some(now + FOLDER_POLL);
        }
        if !self.process_jobs.is_empty() && self.next_process_poll.is_none() {
            self.next_process_poll = Some(now + PROCESS_POLL);
        }
        // The jobs' moments are worked out once a snapshot; the watcher's moves with its beat.
        let jobs = match self.engine_deadline {
            Some((judged, at)) if judged == snapshot.generated_at => at,
            _ => {
                let at = self.engine.next_job_deadline(snapshot);
                self.engine_deadline = Some((snapshot.generated_at, at));
                at
            }
        };
        [
            jobs,
            self.engine.watcher_deadline(snapshot),
            self.next_holder_poll,
            self.next_folder_poll,
            self.next_process_poll,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

//! The engine: the one place that sequences probe -> core for every command.
//!
//! `mihari check`, the demo, the dashboard and (later) the watcher all ask the engine for a
//! [`Snapshot`]: the evidence of every job, its assessment, and the action list. The engine
//! owns the probes' memory (incremental counts, the last result of each check, the last
//! evidence of each job) and hands `core` the clock reading of each pass, so `core` stays pure.
//! It also answers the questions an event-driven loop asks: which files and holders to watch,
//! which jobs a changed path belongs to, and the next moment a verdict can change by time
//! alone. A state store that cannot be used or read is a fault on the snapshot (`check`
//! says UNKNOWN), never an empty answer. It never draws and never blocks on a check: checks
//! are handed out to run elsewhere. A decision goes one way through, in [`decide`]: proposed
//! here, answered by whoever asked, then re-checked, recorded and carried out there.

pub mod decide;
mod folders;
pub mod live;
mod record;
pub mod triggers;

/// The event log as a front-end reads it: its events, and how to ask for some.
pub use crate::store::{Event, EventFilter};
pub use record::WatcherStatus;

/// The watch lock's file name inside `state_dir`.
pub fn record_watch_lock_name() -> &'static str {
    record::WATCH_LOCK
}

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;

use chrono::{DateTime, Duration, Utc};

use crate::config::{CheckSpec, Config, JobSpec};
use crate::core::assess::assess_sampled;
use crate::core::decision::{
    ApprovalPlan, Decision, HolderView, NotePlan, ReleasePlan, RestartPlan, claim_key, cooldown,
    next_route, policy_words, release_refusal, restart_refusal,
};
use crate::core::{
    ActionList, Assessment, CheckOutcome, Evidence, Liveness, Reading, State, order_with_rules,
};
pub use crate::probe::Sources;
use crate::probe::{Prober, checks};
use crate::store::{Actor, Fault, Store, StoreError};

/// Why the state store in `state_dir` cannot be used, naming the file or folder and what to
/// do: a damaged store is moved aside, a full disk is named as such, a refusal already says
/// its fix. The store's own error does not always name the folder: on a read-only
/// filesystem an existing store fails with SQLite's bare "unable to open database file" (its
/// -wal and -shm files cannot be made).
pub fn store_error_words(state_dir: &Path, error: &StoreError) -> String {
    let db = state_dir.join(crate::store::DB_FILE);
    let words = error.to_string();
    let fault = match error.fault() {
        Fault::Other if crate::store::files::no_space_left(state_dir) => Fault::Full,
        fault => fault,
    };
    match fault {
        Fault::Refused => words,
        Fault::Damaged if words.contains(&format!("'{}'", db.display())) => {
            format!("{words}: {}", crate::store::move_aside_words(&db))
        }
        Fault::Damaged => format!(
            "the state store '{}' is damaged ({words}): {}",
            db.display(),
            crate::store::move_aside_words(&db)
        ),
        Fault::Full => format!(
            "the disk holding the state store '{}' is full ({words}): free space there",
            db.display()
        ),
        Fault::Busy => format!(
            "the state store '{}' stayed locked by another process ({words}); if this \
             lasts, look for a hung process holding it: fuser -v '{}'",
            db.display(),
            db.display()
        ),
        Fault::Other if words.contains("settings.state_dir") => words,
        Fault::Other => format!(
            "{words} (state folder '{}': mihari must be able to create and write files \
             there; otherwise set settings.state_dir to a folder where it can)",
            state_dir.display()
        ),
    }
}

/// One pass over every job: what was seen and what it means.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub generated_at: DateTime<Utc>,
    /// Evidence per job, in jobs-file order: shared with the engine and with the snapshots
    /// before and after this one, so a job nothing happened to is held once, not per snapshot.
    pub evidence: Vec<(String, Arc<Evidence>)>,
    pub list: ActionList,
    /// Things the operator should know that are not about one job ("no watcher yet").
    pub notices: Vec<String>,
    /// Whether a machine watcher watches these jobs.
    pub watcher: WatcherStatus,
    /// Why the state store cannot be used (damaged, refused, unreadable), naming the file and
    /// what to do: the store's part of every job is unknown, so `check` says UNKNOWN.
    pub store_fault: Option<String>,
    /// The live watcher's report that its writes to the store fail: a broken rule (RED) in
    /// `list.rules` too, named here for the header.
    pub store_writes_failing: Option<String>,
    /// Folders polled because they could not be watched (the inotify watch limit).
    pub polled_folders: usize,
    /// The last save of the jobs file that was refused, as the header says it
    /// ("jobs.yaml:12:5 refused — still watching the last good file"); a broken rule in
    /// `list.rules` too, with why.
    pub config_refused: Option<String>,
}

impl Snapshot {
    /// Judges `evidence` (in jobs-file order, one per job of `jobs`) at `now`.
    pub fn judge(jobs: &[JobSpec], evidence: Vec<Evidence>, now: DateTime<Utc>) -> Snapshot {
        Snapshot::judge_with_rules(jobs, evidence, Vec::new(), now)
    }

    /// [`Snapshot::judge`], with rules found broken that belong to no job.
    pub fn judge_with_rules(
        jobs: &[JobSpec],
        evidence: Vec<Evidence>,
        rules: Vec<String>,
        now: DateTime<Utc>,
    ) -> Snapshot {
        // The samples are for the rate and the ETA judged now, not for the snapshot to keep.
        let (evidence, samples): (Vec<_>, Vec<_>) = jobs
            .iter()
            .zip(evidence)
            .map(|(job, mut seen)| {
                let samples = std::mem::take(&mut seen.progress_samples);
                ((job.id.clone(), Arc::new(seen)), samples)
            })
            .unzip();
        let samples: Vec<&[(DateTime<Utc>, u64)]> = samples.iter().map(Vec::as_slice).collect();
        Snapshot::judge_by_id(jobs, evidence, &samples, rules, now)
    }

    /// [`Snapshot::judge_with_rules`] on evidence already paired with its job's id and shared,
    /// as the snapshot keeps it, with each job's samples for the rate and the ETA apart: a
    /// snapshot that copied a farm's evidence would hold it twice (9 MB at 10,000 jobs), and
    /// three times while the screen still shows the one before.
    fn judge_by_id(
        jobs: &[JobSpec],
        evidence: Vec<(String, Arc<Evidence>)>,
        samples: &[&[(DateTime<Utc>, u64)]],
        rules: Vec<String>,
        now: DateTime<Utc>,
    ) -> Snapshot {
        let assessments: Vec<Assessment> = jobs
            .iter()
            .zip(&evidence)
            .enumerate()
            .map(|(at, (job, (_, seen)))| {
                assess_sampled(job, seen, samples.get(at).copied().unwrap_or_default(), now)
            })
            .collect();
        Snapshot {
            generated_at: now,
            evidence,
            list: order_with_rules(assessments, rules),
            notices: Vec::new(),
            watcher: WatcherStatus::Never,
            store_fault: None,
            store_writes_failing: None,
            polled_folders: 0,
            config_refused: None,
        }
    }

    /// The evidence gathered for job `id`.
    pub fn evidence_of(&self, id: &str) -> Option<&Evidence> {
        self.evidence
            .iter()
            .find(|(job, _)| job == id)
            .map(|(_, e)| &**e)
    }

    /// The assessment of job `id`.
    pub fn assessment_of(&self, id: &str) -> Option<&Assessment> {
        self.list.rows().find(|a| a.id == id)
    }
}

/// What a reload of the jobs file changed, by job id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigChange {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Kept, with a different stanza: gathered again.
    pub changed: Vec<String>,
    /// Everything starts again (a new `state_dir`).
    pub everything: bool,
}

impl ConfigChange {
    /// The jobs to gather now.
    pub fn to_gather(&self) -> HashSet<String> {
        self.added.iter().chain(&self.changed).cloned().collect()
    }

    /// The words of the `config-reloaded` event: how many jobs, which came and went.
    pub fn words(&self, jobs: usize) -> String {
        let list = |ids: &[String]| {
            const SHOWN: usize = 10;
            let mut words = ids
                .iter()
                .take(SHOWN)
                .map(|id| format!("'{id}'"))
                .collect::<Vec<_>>()
                .join(", ");
            if ids.len() > SHOWN {
                words.push_str(&format!(" and {} more", ids.len() - SHOWN));
            }
            words
        };
        let mut parts = vec![format!("{jobs} jobs")];
        if !self.added.is_empty() {
            parts.push(format!("added {}", list(&self.added)));
        }
        if !self.removed.is_empty() {
            parts.push(format!("removed {}", list(&self.removed)));
        }
        if !self.changed.is_empty() {
            parts.push(format!("changed {}", list(&self.changed)));
        }
        if parts.len() == 1 {
            parts.push("nothing added or removed".to_string());
        }
        crate::core::text::inert(&parts.join("; "))
    }
}

/// The digests and each day's decisions, as the operator's digest view shows them.
#[derive(Debug, Clone, Default)]
pub struct DigestDays {
    pub latest: Option<crate::core::digest::Digest>,
    pub previous: Vec<crate::core::digest::Digest>,
    pub pending: Vec<crate::core::digest::DigestItem>,
    pub happened: HashMap<Option<i64>, Vec<Event>>,
}

/// A check that is due, owned so it can run on another thread while the engine goes on.
#[derive(Debug, Clone)]
pub struct DueCheck {
    pub job: String,
    pub spec: CheckSpec,
    pub cwd: PathBuf,
}

impl DueCheck {
    /// Runs the check (blocking, at most its timeout) and returns its outcome with its key.
    pub fn run(self) -> CheckResultFor {
        let outcome = checks::run_check(&self.spec, &self.cwd);
        CheckResultFor {
            job: self.job,
            check: self.spec.name,
            outcome,
        }
    }
}

/// One check's outcome, for the job it belongs to.
#[derive(Debug, Clone)]
pub struct CheckResultFor {
    pub job: String,
    /// The check's name as the jobs file writes it: the key its result is kept under. The
    /// outcome's own name is made inert for display and may differ from it.
    pub check: String,
    pub outcome: CheckOutcome,
}

/// Holds the jobs file and the probes' memory between passes.
#[derive(Debug)]
pub struct Engine {
    config: Config,
    /// Where the jobs that declare checks are in `config.jobs`: what is due is asked at every
    /// pass, and a farm of 10,000 jobs with few checks need not be walked for it.
    checked: Vec<usize>,
    prober: Prober,
    /// The latest outcome of each check, by (job id, check name).
    checks: HashMap<(String, String), CheckOutcome>,
    /// The latest evidence of each job, in jobs-file order (empty until the first gather),
    /// with the store's part and the checks' outcomes in it: shared with the snapshots, and
    /// copied only for a job whose evidence changes while a snapshot still holds it.
    evidence: Vec<Arc<Evidence>>,
    /// Checks handed out by [`Engine::take_due_checks`] whose results have not come back.
    checks_out: HashSet<(String, String)>,
    /// The state store, read for heartbeats, approvals and past starts; `None` when it cannot
    /// be opened or was found damaged (then `store_fault` or `store_notice` says why).
    store: Option<Store>,
    /// Why the store cannot be used as it stands: shown, and `check` is UNKNOWN, until it can.
    store_fault: Option<String>,
    /// Why there is no store, when none exists yet and none can be made there: a notice only,
    /// for nothing recorded is hidden.
    store_notice: Option<String>,
    /// When a store that could not be opened, or was found damaged, is opened again.
    store_retry: Option<DateTime<Utc>>,
    /// The store's part as last read, and when: a pass that file events ask for uses it as it
    /// is (a write to the store is a file event of its own, which reads it again), so a storm
    /// of log writes does not query the store for every job ten times a second.
    store_view: Option<(record::StoreView, DateTime<Utc>)>,
    /// The live watcher's report that its writes to the store fail, as last read.
    store_writes_failing: Option<String>,
    /// Why the metrics textfile cannot be trusted (its folder, or a file another user left at
    /// its name), judged at every read of the store: a broken rule.
    textfile_refusal: Option<String>,
    /// Whether a machine watcher watches this state_dir, as last read.
    watcher: WatcherStatus,
    /// Recent (time, done) samples of each job, oldest first: the rate and the ETA of the
    /// next judgments (a fresh `check` has none; a rate the job prints needs none).
    samples: HashMap<String, Vec<(DateTime<Utc>, u64)>>,
    /// The last save of the jobs file that was refused, while the last good one stays in
    /// force: (the header's words, the broken rule's words).
    config_refusal: Option<(String, String)>,
    /// Which jobs each declared path belongs to (by position in the jobs file): a file event
    /// names a path, and looking it up must not cost a walk over every job of a farm.
    paths: PathIndex,
    /// When the progress files' line counts were last kept in `state_dir`.
    counts_kept_at: Option<DateTime<Utc>>,
    /// Why the line counts cannot be kept, when the last try failed: shown by a dashboard
    /// or a watcher ([`Engine::saying_count_faults`]), never by a one-off command.
    counts_fault: Option<String>,
    say_counts_fault: bool,
    /// What was kept of each looked-at holder between looks, by job id.
    looked: HashMap<String, Looked>,
    /// A long-running engine (the dashboard's, the watcher's) keeps its looks at holders and
    /// looks again on its timer; a one-off one (`check`) has no earlier look and takes two
    /// reads [`FIRST_LOOK_GAP_MS`] apart.
    keeps_looks: bool,
}

/// What a long-running engine keeps of its last look at a job's holder.
#[derive(Debug, Clone)]
struct Looked {
    holder: (u32, u64),
    positions: bool,
    last: crate::core::activity::Sample,
    reading: crate::core::activity::ActivityReading,
    next_at: DateTime<Utc>,
}

/// The time between the two reads of a first look that must judge at once (a one-off `check`,
/// or a holder already quiet for longer than `stall_sec` when a long-running engine first
/// sees it): long enough for a busy reader's position to move and for CPU time to count 50
/// ticks, short enough that `check` stays quick. Taken once for all holders of a pass.
pub const FIRST_LOOK_GAP_MS: u64 = 500;

/// The least time between two writes of the line counts while they keep changing: a
/// process that ends between two loses at most this much counting to the next one.
const COUNTS_KEPT_EVERY_SEC: i64 = 60;

/// The least time between two kept samples of an unchanged done, and the most samples kept.
const SAMPLE_EVERY_SEC: i64 = 15;
const SAMPLES_KEPT: usize = 40;

/// What the operator asks for on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Restart,
    Release,
    /// Remove a stale marker (the first one, from the dashboard).
    ReleaseMarker,
    Approve,
    Deny,
    Pause,
    Resume,
    Acknowledge,
}

impl Action {
    /// The verb, as the operator says it.
    pub fn verb(self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::Release => "release",
            Action::ReleaseMarker => "release marker",
            Action::Approve => "approve",
            Action::Deny => "deny",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Acknowledge => "acknowledge",
        }
    }
}

/// Where the jobs that declare checks are in `jobs`.
fn checked_jobs(jobs: &[crate::config::JobSpec]) -> Vec<usize> {
    jobs.iter()
        .enumerate()
        .filter(|(_, job)| !job.checks.is_empty())
        .map(|(at, _)| at)
        .collect()
}

impl Engine {
    pub fn new(config: Config) -> Self {
        let opened = open_store(&config.settings.state_dir);
        let paths = path_index(&config.jobs);
        let mut prober = Prober::new();
        prober
            .counter()
            .adopt(crate::store::counts::load(&config.settings.state_dir));
        prober
            .log_readings()
            .adopt(crate::store::readings::load(&config.settings.state_dir));
        Engine {
            paths,
            checked: checked_jobs(&config.jobs),
            counts_kept_at: None,
            counts_fault: None,
            say_counts_fault: false,
            config_refusal: None,
            config,
            prober,
            checks: HashMap::new(),
            evidence: Vec::new(),
            checks_out: HashSet::new(),
            store_retry: opened.store.is_none().then(|| Utc::now() + STORE_RETRY),
            store_view: None,
            store: opened.store,
            store_fault: opened.fault,
            store_notice: opened.notice,
            store_writes_failing: None,
            textfile_refusal: None,
            watcher: WatcherStatus::Never,
            samples: HashMap::new(),
            looked: HashMap::new(),
            keeps_looks: false,
        }
    }

    /// A dashboard's or a watcher's engine: keeps its looks at quiet holders between passes
    /// and looks again on its timer ([`Engine::next_deadline`]), never waiting inside a pass
    /// but for a holder already stalled-looking at its first look.
    pub fn keeping_looks(mut self) -> Self {
        self.keeps_looks = true;
        self
    }

    /// Looks at the live holders that are due a look (SPEC §3 `io`): those whose other
    /// progress is quiet, at a pace tied to their `stall_sec`. A holder no longer quiet, gone
    /// or changed is forgotten. A first look that must judge at once takes two reads
    /// [`FIRST_LOOK_GAP_MS`] apart, one wait for all of them.
    pub fn look_at_holders(&mut self, now: DateTime<Utc>) {
        use crate::core::activity::{self as activity, Track};
        let mut due: Vec<(usize, activity::Plan, bool)> = Vec::new();
        for (at, job) in self.config.jobs.iter().enumerate() {
            let Some(seen) = self.evidence.get(at) else {
                break;
            };
            let holder = if job.lock.is_some() || job.process.is_some() {
                crate::core::assess::live_holder(job, seen, now)
            } else {
                None
            };
            let plan = holder.and_then(|(holder, age)| {
                activity::plan(job, Some(holder), age).map(|plan| (plan, age))
            });
            let Some((plan, age)) = plan else {
                self.looked.remove(&job.id);
                if seen.activity.is_some() {
                    Arc::make_mut(&mut self.evidence[at]).activity = None;
                }
                continue;
            };
            let kept = self.looked.get(&job.id).filter(|k| {
                k.holder == (plan.pid, plan.start_ticks) && k.positions == plan.positions
            });
            match kept {
                Some(kept) if kept.next_at > now + Duration::milliseconds(5) => {
                    if seen.activity.is_none() {
                        let reading = Reading::Found(kept.reading.clone());
                        Arc::make_mut(&mut self.evidence[at]).activity = Some(Box::new(reading));
                    }
                }
                Some(_) => due.push((at, plan, false)),
                None => {
                    // A long-running engine waits for its next look, unless the verdict
                    // could turn STALLED before it.
                    let limit = job.stall_limit().unwrap_or(u64::MAX) as f64;
                    let pair =
                        !self.keeps_looks || age.is_none_or(|age| age + plan.every_sec >= limit);
                    self.looked.remove(&job.id);
                    due.push((at, plan, pair));
                }
            }
        }
        if due.is_empty() {
            return;
        }
        let jobs = &self.config.jobs;
        let state_dir = &self.config.settings.state_dir;
        let look = |at: usize, plan: &activity::Plan| {
            let not_progress = activity::not_progress(&jobs[at], state_dir);
            crate::probe::activity::look(plan.pid, plan.start_ticks, plan.positions, &not_progress)
        };
        let mut first: HashMap<usize, crate::core::activity::Sample> = HashMap::new();
        if due.iter().any(|(_, _, pair)| *pair) {
            for (at, plan, pair) in &due {
                if *pair && let Ok(sample) = look(*at, plan) {
                    first.insert(*at, sample);
                }
            }
            thread::sleep(std::time::Duration::from_millis(FIRST_LOOK_GAP_MS));
        }
        for (at, plan, _) in due {
            let job_id = self.config.jobs[at].id.clone();
            let kept = self.looked.remove(&job_id);
            let after = match look(at, &plan) {
                Ok(sample) => sample,
                Err(error) => {
                    // Gone, or not the same process: the next gather says what became of it.
                    let gone = error.contains("is gone") || error.contains("another process");
                    let reading = (!gone).then(|| Box::new(Reading::Fault(inert_words(&error))));
                    Arc::make_mut(&mut self.evidence[at]).activity = reading;
                    continue;
                }
            };
            let before = kept.as_ref().map(|k| &k.last).or(first.get(&at));
            let track = kept.as_ref().map(|k| Track::of(&k.reading));
            let Some(reading) = activity::judge(before, &after, track.as_ref()) else {
                continue;
            };
            Arc::make_mut(&mut self.evidence[at]).activity =
                Some(Box::new(Reading::Found(reading.clone())));
            if self.keeps_looks {
                self.looked.insert(
                    job_id,
                    Looked {
                        holder: (plan.pid, plan.start_ticks),
                        positions: plan.positions,
                        next_at: activity::next_look(after.at, plan.every_sec),
                        last: after,
                        reading,
                    },
                );
            }
        }
    }

    /// Keeps each job's done of `snapshot` as a sample for the rates of later judgments: a
    /// new one when done changed or [`SAMPLE_EVERY_SEC`] passed, within the rate window.
    fn keep_samples(&mut self, snapshot: &Snapshot) {
        let at = snapshot.generated_at;
        let window = Duration::seconds(crate::core::assess::RATE_WINDOW_SEC);
        for row in snapshot.list.rows() {
            let Some(done) = row.done else {
                self.samples.remove(&row.id);
                continue;
            };
            let kept = self.samples.entry(row.id.clone()).or_default();
            let due = kept.last().is_none_or(|&(last_at, last_done)| {
                last_done != done || at - last_at >= Duration::seconds(SAMPLE_EVERY_SEC)
            });
            if due && kept.last().is_none_or(|&(last_at, _)| at > last_at) {
                kept.push((at, done));
            }
            let old = kept
                .iter()
                .take_while(|&&(t, _)| at - t > window)
                .count()
                .max(kept.len().saturating_sub(SAMPLES_KEPT));
            kept.drain(..old);
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Bytes of progress files read for counting since this engine was made: a reload gathers
    /// only the jobs it added or changed, so what it adds here is theirs alone.
    pub fn progress_bytes_counted(&self) -> u64 {
        self.prober.progress_bytes_counted()
    }

    /// Puts `config` (a new load of the jobs file) in force, keeping what is known of every
    /// job it keeps unchanged: its evidence, its checks' results and the line counts of its
    /// progress files, so a reload of a farm gathers only the jobs it added or changed. A new
    /// `state_dir` is a new store: everything starts again from it. Clears a refusal.
    pub fn replace_config(&mut self, config: Config) -> ConfigChange {
        self.config_refusal = None;
        // The next pass reads the store again: the new file may name another state_dir.
        self.store_view = None;
        let old: HashMap<&str, (usize, &JobSpec)> = self
            .config
            .jobs
            .iter()
            .enumerate()
            .map(|(at, job)| (job.id.as_str(), (at, job)))
            .collect();
        let mut change = ConfigChange::default();
        let mut evidence = Vec::with_capacity(config.jobs.len());
        let gathered = self.evidence.len() == self.config.jobs.len();
        for job in config.jobs.iter() {
            match old.get(job.id.as_str()) {
                Some((at, before)) if *before == job && gathered => {
                    evidence.push(self.evidence[*at].clone());
                }
                Some(_) => {
                    change.changed.push(job.id.clone());
                    evidence.push(Arc::default());
                }
                None => {
                    change.added.push(job.id.clone());
                    evidence.push(Arc::default());
                }
            }
        }
        let kept: HashSet<&str> = config.jobs.iter().map(|j| j.id.as_str()).collect();
        change.removed = self
            .config
            .jobs
            .iter()
            .filter(|job| !kept.contains(job.id.as_str()))
            .map(|job| job.id.clone())
            .collect();
        if config.settings.state_dir != self.config.settings.state_dir {
            let say = self.say_counts_fault;
            let keeps = self.keeps_looks;
            *self = Engine::new(config);
            self.say_counts_fault = say;
            self.keeps_looks = keeps;
            change.everything = true;
            return change;
        }
        let checks: HashSet<(String, String)> = config
            .jobs
            .iter()
            .flat_map(|job| job.checks.iter().map(|c| (job.id.clone(), c.name.clone())))
            .collect();
        self.checks.retain(|key, _| checks.contains(key));
        self.checks_out.retain(|key| checks.contains(key));
        self.paths = path_index(&config.jobs);
        self.checked = checked_jobs(&config.jobs);
        self.config = config;
        self.evidence = if gathered { evidence } else { Vec::new() };
        change
    }

    /// Notes that a save of the jobs file was refused: the last good file stays in force, and
    /// every snapshot says so (the header, and a broken rule with why) until a save loads.
    pub fn refuse_config(&mut self, error: &crate::config::ConfigError) {
        let name = error
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| error.path.display().to_string());
        let at = match error.position {
            Some((line, column)) => format!("{name}:{line}:{column}"),
            None => name,
        };
        let words =
            crate::core::text::inert(&format!("{at} refused — still watching the last good file"));
        let rule = crate::core::text::inert(&format!(
            "the jobs file '{}' was refused at {at}: {}; the last good file stays in force until it is fixed",
            error.path.display(),
            error.summary()
        ));
        self.config_refusal = Some((words, rule));
    }

    /// The refusal in force, as (file:line:col words for the header, the broken rule).
    pub fn config_refusal(&self) -> Option<&(String, String)> {
        self.config_refusal.as_ref()
    }

    /// Runs checks in parallel, blocking until they finish, and remembers their outcomes:
    /// every check when `now` is `None`, otherwise only the due ones. At most
    /// [`checks::in_flight_limit`] run at once (this thread among them), each worker taking
    /// the next check when its last ends: every check runs, and none is started into a full
    /// file table.
    pub fn run_checks(&mut self, now: Option<DateTime<Utc>>) {
        let due = self.due_checks(now);
        let workers = checks::in_flight_limit().min(due.len());
        let queue = std::sync::Mutex::new(due.into_iter());
        let next = || queue.lock().ok().and_then(|mut queue| queue.next());
        let work = || {
            let mut done = Vec::new();
            while let Some(check) = next() {
                done.push(check.run());
            }
            done
        };
        let results: Vec<CheckResultFor> = thread::scope(|scope| {
            // A worker whose thread cannot be started (the user's process limit reached) is
            // one fewer: this thread works too, so the checks run even with none started.
            let helpers: Vec<_> = (1..workers)
                .map_while(|_| thread::Builder::new().spawn_scoped(scope, work).ok())
                .collect();
            let mut results = work();
            for helper in helpers {
                results.extend(helper.join().unwrap_or_default());
            }
            results
        });
        self.record_checks(results);
    }

    /// The checks to run now: all of them when `now` is `None`, otherwise those never run or
    /// whose `every_sec` has passed since their last run.
    pub fn due_checks(&self, now: Option<DateTime<Utc>>) -> Vec<DueCheck> {
        let default_cwd = self.config_folder();
        let mut due = Vec::new();
        for job in self
            .checked
            .iter()
            .filter_map(|&at| self.config.jobs.get(at))
        {
            for check in &job.checks {
                let last = self.checks.get(&(job.id.clone(), check.name.clone()));
                let is_due = match (now, last) {
                    (Some(now), Some(last)) => now >= last.at + every(check),
                    _ => true,
                };
                if is_due {
                    due.push(DueCheck {
                        job: job.id.clone(),
                        spec: check.clone(),
                        cwd: check_folder(job, &default_cwd),
                    });
                }
            }
        }
        due
    }

    /// The due checks that are not already out, marked as out until their results are
    /// recorded: for a caller that runs them in the background. No more than
    /// [`checks::in_flight_limit`] are out at once; the rest stay due, taken as results come
    /// back.
    pub fn take_due_checks(&mut self, now: DateTime<Utc>) -> Vec<DueCheck> {
        let room = checks::in_flight_limit().saturating_sub(self.checks_out.len());
        let due: Vec<DueCheck> = self
            .due_checks(Some(now))
            .into_iter()
            .filter(|c| {
                !self
                    .checks_out
                    .contains(&(c.job.clone(), c.spec.name.clone()))
            })
            .take(room)
            .collect();
        for check in &due {
            self.checks_out
                .insert((check.job.clone(), check.spec.name.clone()));
        }
        due
    }

    /// Remembers check outcomes; the next snapshot shows them.
    pub fn record_checks(&mut self, results: impl IntoIterator<Item = CheckResultFor>) {
        let mut jobs = HashSet::new();
        for result in results {
            let key = (result.job, result.check);
            self.checks_out.remove(&key);
            jobs.insert(key.0.clone());
            self.checks.insert(key, result.outcome);
        }
        if self.evidence.len() != self.config.jobs.len() {
            return;
        }
        for (job, seen) in self.config.jobs.iter().zip(self.evidence.iter_mut()) {
            if jobs.contains(&job.id) {
                let outcomes = outcomes_of(&self.checks, job);
                if seen.checks != outcomes {
                    Arc::make_mut(seen).checks = outcomes;
                }
            }
        }
    }

    /// Gathers every job's evidence, judges it at `now`, and orders the action list.
    pub fn snapshot(&mut self, now: DateTime<Utc>) -> Snapshot {
        self.refresh(None, now)
    }

    /// Gathers the evidence of the jobs in `only` (every job when `None`; every job as well
    /// before the first gather), keeps the rest as last seen, and judges all of it at `now`.
    pub fn refresh(&mut self, only: Option<&HashSet<String>>, now: DateTime<Utc>) -> Snapshot {
        let only: Option<HashMap<String, Sources>> =
            only.map(|ids| ids.iter().map(|id| (id.clone(), Sources::ALL)).collect());
        self.refresh_sources(only.as_ref(), now)
    }

    /// [`Engine::refresh`] of the named sources of each job in `only` alone: a file event
    /// re-reads what its path feeds ([`Engine::sources_touching`]), and the rest of the job's
    /// evidence is kept as last gathered. [`Sources::ALL`] gathers a job whole.
    pub fn refresh_sources(
        &mut self,
        only: Option<&HashMap<String, Sources>>,
        now: DateTime<Utc>,
    ) -> Snapshot {
        let first = self.evidence.len() != self.config.jobs.len();
        if first {
            self.evidence = vec![Arc::default(); self.config.jobs.len()];
        }
        // The store is read again when everything is gathered, or its last reading has aged;
        // otherwise what it said is applied to the jobs gathered again.
        let reread = only.is_none()
            || self
                .store_view
                .as_ref()
                .is_none_or(|(_, at)| now - *at >= STORE_VIEW_KEPT || now < *at);
        let view = match self.store_view.take() {
            Some((view, at)) if !reread => (view, at),
            _ => (self.read_store(now), now),
        };
        let wanted: Vec<Sources> = self
            .config
            .jobs
            .iter()
            .map(|job| match only {
                _ if first => Sources::ALL,
                None => Sources::ALL,
                Some(ids) => ids.get(&job.id).copied().unwrap_or_default(),
            })
            .collect();
        // One scan of /proc for every job found by its command line, shared by all of them.
        let scan = if self
            .config
            .jobs
            .iter()
            .zip(&wanted)
            .any(|(job, wanted)| job.process.is_some() && *wanted == Sources::ALL)
        {
            self.prober.scan_processes(&self.config.jobs)
        } else {
            Default::default()
        };
        // One `squeue --json` for every job Slurm runs, shared by all of them (SPEC §12).
        let slurm = if self
            .config
            .jobs
            .iter()
            .zip(&wanted)
            .any(|(job, wanted)| job.slurm.is_some() && *wanted == Sources::ALL)
        {
            self.prober.scan_slurm(&self.config.jobs)
        } else {
            Default::default()
        };
        let lock_wanted: Vec<bool> = wanted.iter().map(|w| w.contains(Sources::LOCK)).collect();
        let mut locks = read_locks(&self.config.jobs, &lock_wanted).into_iter();
        // One pass: each folder of the jobs' files is opened and judged once, not per file.
        crate::probe::safe_open::folders_remembered(|| {
            for ((job, seen), wanted) in self
                .config
                .jobs
                .iter()
                .zip(self.evidence.iter_mut())
                .zip(&wanted)
            {
                let lock = locks.next().flatten();
                if *wanted == Sources::ALL {
                    let mut gathered = self.prober.gather_with_lock(job, &scan, &slurm, lock);
                    gathered.checks = outcomes_of(&self.checks, job);
                    *seen = Arc::new(gathered);
                } else if !wanted.is_empty() {
                    self.prober
                        .regather(job, Arc::make_mut(seen), *wanted, lock);
                }
                // The store's part costs a few queries for every job together, and is put into
                // every job when it was read again; a source read again changes none of it.
                if reread || *wanted == Sources::ALL {
                    view.0
                        .record(job, now)
                        .apply(seen, job, self.store_fault.as_ref());
                }
            }
        });
        self.store_view = Some(view);
        self.look_at_holders(now);
        self.keep_counts(now);
        let snapshot = self.reassess(now);
        self.keep_samples(&snapshot);
        snapshot
    }

    /// A dashboard's or a watcher's engine: says in its notices when the line counts cannot
    /// be kept (a one-off command only loses the next one's head start, and says nothing).
    pub fn saying_count_faults(mut self) -> Self {
        self.say_counts_fault = true;
        self
    }

    /// Keeps the line counts in `state_dir` for the next process when they changed: at once
    /// the first time (a `check` ends after one pass), then at most every
    /// [`COUNTS_KEPT_EVERY_SEC`].
    fn keep_counts(&mut self, now: DateTime<Utc>) {
        let due = self
            .counts_kept_at
            .is_none_or(|at| now - at >= Duration::seconds(COUNTS_KEPT_EVERY_SEC));
        if !due {
            return;
        }
        let counts_changed = self.prober.counter().take_changed();
        let readings_changed = self.prober.log_readings().take_changed();
        if !counts_changed && !readings_changed {
            return;
        }
        self.counts_kept_at = Some(now);
        let state_dir = &self.config.settings.state_dir;
        let mut kept = Ok(());
        if counts_changed {
            kept = crate::store::counts::save(state_dir, self.prober.counter().counts());
        }
        if readings_changed {
            let readings =
                crate::store::readings::save(state_dir, self.prober.log_readings().kept(), now);
            kept = kept.and(readings);
        }
        self.counts_fault = kept.err();
    }

    /// Reads again what the state store says (heartbeats, approvals, past starts, history):
    /// what changes when another process writes the store. A few queries for every job
    /// together, whatever their number.
    pub fn refresh_store(&mut self, now: DateTime<Utc>) -> Snapshot {
        if self.evidence.len() != self.config.jobs.len() {
            return self.refresh(None, now);
        }
        let view = self.read_store(now);
        for (job, seen) in self.config.jobs.iter().zip(self.evidence.iter_mut()) {
            view.record(job, now)
                .apply(seen, job, self.store_fault.as_ref());
        }
        self.store_view = Some((view, now));
        let snapshot = self.reassess(now);
        self.keep_samples(&snapshot);
        snapshot
    }

    /// Reads again whether a watcher watches ([`record::watcher_status`]): what changes when
    /// the watch lock is taken, let go or beaten. A beat of the same watcher (its lock's time
    /// moved, twice a minute) only judges again; anything else — another watcher, none, a
    /// store that could not be read — reads the whole store again, as
    /// [`Engine::refresh_store`] does.
    pub fn refresh_watcher(&mut self, now: DateTime<Utc>) -> Snapshot {
        match self.same_watcher_again(now) {
            Some(status) => {
                self.watcher = status;
                self.reassess(now)
            }
            None => self.refresh_store(now),
        }
    }

    /// Whether a watcher watches, read again, when it is the same live watcher as before and
    /// every job's part of the store is in hand; `None` otherwise: another watcher, none, or
    /// a store fault, for which the whole store is read again.
    fn same_watcher_again(&self, now: DateTime<Utc>) -> Option<WatcherStatus> {
        if self.evidence.len() != self.config.jobs.len() || self.store_fault.is_some() {
            return None;
        }
        record::watcher_status(self.store.as_ref(), &self.config, now)
            .ok()
            .filter(|status| self.watcher.same_live_watcher(status))
    }

    /// A beat of the same live watcher that changes nothing judged (it was not stuck, and is
    /// not): its status is taken, and returned as of `now` for the snapshot in hand, with no
    /// job judged again. `None` when it does change something, or is not such a beat: that
    /// is [`Engine::refresh_watcher`]'s. On 10,000 jobs a judgment costs some 20 ms, and the
    /// watcher beats twice a minute.
    pub fn absorb_beat(&mut self, now: DateTime<Utc>) -> Option<WatcherStatus> {
        let status = self.same_watcher_again(now)?;
        let (was, is) = (self.watcher.at(now), status.at(now));
        let state_dir = &self.config.settings.state_dir;
        if was.broken_rule(now) != is.broken_rule(now)
            || was.notice(state_dir) != is.notice(state_dir)
        {
            return None;
        }
        self.watcher = status;
        Some(is)
    }

    /// Reads the store's part of every job and whether a watcher watches. A read that fails
    /// is a store fault, never an empty answer: the part stays empty, and the snapshot says
    /// why. A damaged store is closed and opened (and checked) again a while later, so
    /// moving it aside is seen without a restart.
    fn read_store(&mut self, now: DateTime<Utc>) -> record::StoreView {
        let view = self.read_store_records(now);
        // Only the live watcher's own report counts: a dead watcher's is stale, and its
        // absence is a broken rule of its own.
        self.store_writes_failing = match self.watcher {
            WatcherStatus::Alive { pid, .. } => {
                crate::store::health::read(&self.config.settings.state_dir)
                    .filter(|health| health.pid == pid)
                    .and_then(|health| health.rule())
            }
            _ => None,
        };
        self.textfile_refusal = self
            .config
            .settings
            .prometheus_textfile
            .as_deref()
            .and_then(crate::effect::textfile::refusal);
        view
    }

    /// Why the metrics textfile is not written, when it is not.
    pub fn textfile_refusal(&self) -> Option<&String> {
        self.textfile_refusal.as_ref()
    }

    fn read_store_records(&mut self, now: DateTime<Utc>) -> record::StoreView {
        if self.store.is_none() && self.store_retry.is_some_and(|at| now >= at) {
            let opened = open_store(&self.config.settings.state_dir);
            self.store_retry = opened.store.is_none().then(|| now + STORE_RETRY);
            self.store = opened.store;
            self.store_fault = opened.fault;
            self.store_notice = opened.notice;
        }
        let Some(store) = &self.store else {
            self.watcher = match &self.store_fault {
                Some(_) => {
                    record::watcher_from_lock(&self.config).unwrap_or(WatcherStatus::Unknown {
                        why: "the state store cannot be read, so whether a watcher ran is \
                              not known"
                            .to_string(),
                    })
                }
                None => record::watcher_from_lock(&self.config).unwrap_or(WatcherStatus::Never),
            };
            return record::StoreView::default();
        };
        let read = record::StoreView::read(store, &self.config.jobs, now).and_then(|view| {
            Ok((
                view,
                record::watcher_status(Some(store), &self.config, now)?,
            ))
        });
        match read {
            Ok((view, watcher)) => {
                self.store_fault = None;
                self.watcher = watcher;
                view
            }
            Err(error) => {
                self.store_fault = Some(store_error_words(&self.config.settings.state_dir, &error));
                if error.fault() == Fault::Damaged {
                    self.store = None;
                    self.store_retry = Some(now + STORE_RETRY);
                }
                self.watcher =
                    record::watcher_from_lock(&self.config).unwrap_or(WatcherStatus::Unknown {
                        why: "the state store cannot be read, so whether a watcher ran is not \
                              known"
                            .to_string(),
                    });
                record::StoreView::default()
            }
        }
    }

    /// The event log as the events view shows it; an error in words when it cannot be read.
    pub fn events(
        &self,
        filter: &crate::store::EventFilter,
    ) -> Result<Vec<crate::store::Event>, String> {
        match &self.store {
            Some(store) => store.events(filter).map_err(|e| e.to_string()),
            None => Err("the state store is unavailable".to_string()),
        }
    }

    /// The state store's files: a write to them (a heartbeat, an approval, a decision) is
    /// news for every job; so is the watcher's report that its writes fail.
    pub fn store_paths(&self) -> Vec<PathBuf> {
        let state_dir = &self.config.settings.state_dir;
        let db = state_dir.join(crate::store::DB_FILE);
        let wal = crate::store::files::beside(&db, "-wal");
        vec![db, wal, crate::store::health::path_in(state_dir)]
    }

    /// Proposes `action` on job `id` as seen at `now`: the decision with everything its
    /// confirmation shows, or why it may not be proposed.
    pub fn propose(
        &self,
        action: Action,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<Decision, String> {
        let snapshot = self.reassess(now);
        let (Some(job), Some(row), Some(seen)) = (
            self.config.jobs.iter().find(|j| j.id == id),
            snapshot.assessment_of(id),
            snapshot.evidence_of(id),
        ) else {
            return Err(format!("no job '{id}' in the jobs file"));
        };
        match action {
            Action::Restart => self
                .propose_restart(job, row, seen, now)
                .map(Decision::Restart),
            Action::Release => propose_release(job, row, seen).map(Decision::Release),
            Action::ReleaseMarker => self.propose_marker(id, None, true, now),
            Action::Approve | Action::Deny => {
                let Some(pending) = seen.pending_approvals.first() else {
                    return Err(format!("no approval is pending for '{id}'"));
                };
                approval_decision(action, id, pending)
            }
            Action::Pause | Action::Resume | Action::Acknowledge => {
                propose_note(action, row, &crate::effect::operator_name())
            }
        }
    }

    /// Proposes approving (or denying) the pending approval `key` of job `id`, one of several
    /// the operator chose among; refused when that request is no longer pending.
    pub fn propose_approval(
        &self,
        action: Action,
        id: &str,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Decision, String> {
        let snapshot = self.reassess(now);
        let Some(seen) = snapshot.evidence_of(id) else {
            return Err(format!("no job '{id}' in the jobs file"));
        };
        let Some(pending) = seen.pending_approvals.iter().find(|a| a.key == key) else {
            return Err(format!(
                "approval '{key}' of '{id}' is no longer pending: it was decided meanwhile \
                 (mihari approval list --all)"
            ));
        };
        approval_decision(action, id, pending)
    }

    /// Proposes removing a stale marker of job `id`: the one at `path` (its full path, or its
    /// file name when that names one marker), else its only stale one — or, with
    /// `first_stale`, the first of several. Refused, with why, for a marker that is not stale,
    /// whose holder is alive or unknown, that cannot be looked at, or a folder that is not
    /// empty. The plan carries what the dialog shows: age, content, the job's last attempts and
    /// its last error from the event log.
    pub fn propose_marker(
        &self,
        id: &str,
        path: Option<&Path>,
        first_stale: bool,
        now: DateTime<Utc>,
    ) -> Result<Decision, String> {
        let snapshot = self.reassess(now);
        let (Some(job), Some(seen)) = (
            self.config.jobs.iter().find(|j| j.id == id),
            snapshot.evidence_of(id),
        ) else {
            return Err(format!("no job '{id}' in the jobs file"));
        };
        if job.markers.is_empty() {
            return Err(format!(
                "'{id}' declares no markers: there is nothing to release (add markers: to the \
                 job)"
            ));
        }
        let judged = crate::core::marker::judge_markers(job, seen, now);
        let listed = || {
            judged
                .iter()
                .map(|m| format!("'{}'", m.path.display()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let chosen = match path {
            Some(wanted) => {
                let by_name: Vec<_> = judged
                    .iter()
                    .filter(|m| m.path.file_name() == Some(wanted.as_os_str()))
                    .collect();
                match judged.iter().find(|m| m.path == wanted) {
                    Some(found) => found,
                    None if by_name.len() == 1 => by_name[0],
                    None => {
                        return Err(format!(
                            "'{}' is not a marker of '{id}': its markers are {}",
                            wanted.display(),
                            listed()
                        ));
                    }
                }
            }
            None => {
                let stale: Vec<_> = judged
                    .iter()
                    .filter(|m| m.state == crate::core::marker::MarkerState::Stale)
                    .collect();
                match stale.as_slice() {
                    [] => {
                        let words: Vec<&str> = judged.iter().map(|m| m.words.as_str()).collect();
                        return Err(format!(
                            "no marker of '{id}' is stale: {}",
                            words.join("; ")
                        ));
                    }
                    [one] => *one,
                    [first, ..] if first_stale => *first,
                    several => {
                        let named: Vec<String> = several
                            .iter()
                            .map(|m| format!("'{}'", m.path.display()))
                            .collect();
                        return Err(format!(
                            "{} markers of '{id}' are stale ({}): name the one to release, \
                             like mihari release-marker {id} {}",
                            several.len(),
                            named.join(", "),
                            several[0].path.display()
                        ));
                    }
                }
            }
        };
        use crate::core::marker::MarkerState;
        match chosen.state {
            MarkerState::Stale => {}
            MarkerState::Fine if chosen.reading.as_ref().is_some_and(|r| r.holder.is_some()) => {
                return Err(format!(
                    "{}: a live holder's marker is never released",
                    chosen.words
                ));
            }
            MarkerState::Fine => {
                return Err(format!(
                    "{}: not stale yet, nothing to release",
                    chosen.words
                ));
            }
            MarkerState::Absent => return Err(format!("{}: nothing to release", chosen.words)),
            MarkerState::Unknown | MarkerState::Fault => return Err(chosen.words.clone()),
        }
        let (identity, kind) = crate::effect::release::marker_identity(&chosen.path)?;
        if kind == crate::core::MarkerKind::Folder && identity.len > 0 {
            let content = chosen
                .reading
                .as_ref()
                .map(|r| r.content.clone())
                .unwrap_or_default();
            return Err(format!(
                "the marker folder '{}' is not empty ({content}): mihari removes a folder only \
                 when it is empty; look at what is in it first",
                chosen.path.display()
            ));
        }
        let (attempts, last_error) = self.attempts_of(id);
        let age = chosen.age_sec.map_or_else(
            || "unknown".to_string(),
            |age| {
                format!(
                    "{} (stale after {} s)",
                    crate::core::assess::fmt_secs(age),
                    chosen.stale_after_sec
                )
            },
        );
        Ok(Decision::ReleaseMarker(crate::core::decision::MarkerPlan {
            job: id.to_string(),
            key: claim_key(
                id,
                "release-marker",
                &format!(
                    "{}:{}:{}:{}:{}",
                    chosen.index, identity.dev, identity.ino, identity.mtime_ns, identity.content
                ),
            ),
            path: chosen.path.clone(),
            index: chosen.index,
            kind,
            identity,
            why: chosen.words.clone(),
            age,
            content: chosen
                .reading
                .as_ref()
                .map(|r| r.content.clone())
                .unwrap_or_default(),
            attempts,
            last_error,
        }))
    }

    /// The job's last three attempts (spawns, runs and their ends, restarts that failed) and
    /// its last error, from the event log, in words; nothing when the log cannot be read.
    fn attempts_of(&self, id: &str) -> (Vec<String>, Option<String>) {
        use crate::store::Kind;
        let Some(store) = &self.store else {
            return (Vec::new(), None);
        };
        let filter = crate::store::EventFilter {
            job: Some(id.to_string()),
            last: Some(500),
            ..Default::default()
        };
        let Ok(events) = store.events(&filter) else {
            return (Vec::new(), None);
        };
        let attempt_kinds = [
            Kind::Spawned,
            Kind::Verified,
            Kind::Failed,
            Kind::Started,
            Kind::Exited,
            Kind::Abandoned,
        ];
        let is = |event: &crate::store::Event, kinds: &[Kind]| {
            kinds.iter().any(|k| k.as_str() == event.kind)
        };
        let line = |event: &crate::store::Event| {
            format!(
                "{} {}{}",
                event.at.format("%Y-%m-%d %H:%M:%S UTC"),
                event.kind,
                event
                    .reason
                    .as_deref()
                    .map(|r| format!(": {}", crate::core::text::inert(r)))
                    .unwrap_or_default()
            )
        };
        let mut attempts: Vec<String> = events
            .iter()
            .filter(|e| is(e, &attempt_kinds))
            .rev()
            .take(3)
            .map(line)
            .collect();
        attempts.reverse();
        let last_error = events
            .iter()
            .rev()
            .find(|e| {
                e.kind == Kind::Failed.as_str()
                    || (e.kind == Kind::Exited.as_str()
                        && !e
                            .reason
                            .as_deref()
                            .is_some_and(|r| crate::core::RunExit::from_words(r, e.at).succeeded()))
            })
            .map(line);
        (attempts, last_error)
    }

    fn propose_restart(
        &self,
        job: &JobSpec,
        row: &Assessment,
        seen: &Evidence,
        now: DateTime<Utc>,
    ) -> Result<RestartPlan, String> {
        if let Some(why) = restart_refusal(row) {
            return Err(why);
        }
        // A Slurm job is run exactly once by its claim and Slurm's own queue: no lock here.
        let slurm_job = seen.slurm.as_deref().and_then(|reading| reading.found());
        let slurm_argv = match &job.slurm {
            None => None,
            Some(_) => Some(
                job.slurm_restart_argv(slurm_job.map(|held| held.id))
                    .ok_or_else(
                        || match &job.slurm.as_ref().and_then(|s| s.restart.as_ref()) {
                            Some(_) => format!(
                                "'{}' is restarted by requeue, and Slurm lists no job of it to \
                             requeue: submit it by hand",
                                job.id
                            ),
                            None => format!(
                                "'{}' declares no slurm.submit (or requeue: true): restart it by \
                             hand",
                                job.id
                            ),
                        },
                    )?,
            ),
        };
        if job.run_lock().is_none() && slurm_argv.is_none() {
            return Err(format!(
                "'{}' declares no lock: mihari runs a job exactly once only under its lock; \
                 declare 'lock' (or 'process', and mihari keeps one) in the jobs file",
                job.id
            ));
        }
        let no_restart = crate::config::RestartSpec {
            command: slurm_argv.clone(),
            cwd: None,
            env: Default::default(),
            routes: Vec::new(),
        };
        let restart = match (&job.restart, &slurm_argv) {
            (Some(restart), _) => restart,
            (None, Some(_)) => &no_restart,
            (None, None) => {
                return Err(format!(
                    "'{}' declares no restart.command: restart it by hand",
                    job.id
                ));
            }
        };
        let holder = match &seen.lock {
            Some(Reading::Found(holder)) => Some(holder),
            _ => None,
        };
        let evidence = restart_evidence(row, seen);
        let run_id = holder
            .and_then(|h| h.run_id.clone())
            .unwrap_or_else(|| format!("{}-{}", job.id, now.format("%Y%m%dT%H%M%S")));
        if let Some(fault) = &self.store_fault {
            return Err(format!(
                "a restart cannot be recorded while the state store cannot be used: {fault}"
            ));
        }
        let store = self.store.as_ref();
        let unreadable = |error: StoreError| {
            format!(
                "a restart cannot be decided while the state store cannot be read: {}",
                store_error_words(&self.config.settings.state_dir, &error)
            )
        };
        let used = match store {
            Some(store) => store
                .run_routes(&run_id)
                .map_err(unreadable)?
                .map(|r| r.routes)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let route = next_route(&restart.routes, &used, self.config.settings.max_hops)?;
        let argv = match (route, slurm_argv.as_ref().or(restart.command.as_ref())) {
            (Some(route), _) => route.command.clone(),
            (None, Some(command)) => command.clone(),
            (None, None) => {
                return Err(format!(
                    "'{}' declares no restart.command: restart it by hand",
                    job.id
                ));
            }
        };
        let workspace_hash = job.workspace_key().map(crate::store::workspace_hash);
        let last_spawn = match (&workspace_hash, store) {
            (Some(hash), Some(store)) => store.last_spawn_in_workspace(hash).map_err(unreadable)?,
            _ => None,
        };
        Ok(RestartPlan {
            job: job.id.clone(),
            key: claim_key(&job.id, "restart", &evidence),
            evidence,
            reason: row.reasons.first().cloned().unwrap_or_default(),
            state: row.state,
            bucket: row.bucket.unwrap_or(crate::core::Bucket::Restart),
            argv,
            cwd: restart
                .cwd
                .clone()
                .unwrap_or_else(|| crate::effect::config_folder(&self.config).to_path_buf()),
            route: route.map(|r| r.name.clone()),
            run_id,
            routes_used: used,
            max_hops: self.config.settings.max_hops,
            holder: holder
                .map(|h| HolderView {
                    pid: h.pid,
                    liveness: h.liveness,
                    why: h.why.clone(),
                })
                .or_else(|| {
                    slurm_job.map(|held| HolderView {
                        pid: None,
                        liveness: match held.phase() {
                            crate::core::slurm::SlurmPhase::Ended => Liveness::Dead,
                            crate::core::slurm::SlurmPhase::Alive
                            | crate::core::slurm::SlurmPhase::Suspended => Liveness::Alive,
                            _ => Liveness::Unknown,
                        },
                        why: held.words(),
                    })
                }),
            policy: policy_words(job),
            cooldown: cooldown(
                workspace_hash,
                last_spawn,
                self.config.settings.workspace_cooldown_sec,
                now,
            ),
        })
    }

    /// Judges the last evidence again at `now`, reading nothing: what time alone changes.
    pub fn reassess(&self, now: DateTime<Utc>) -> Snapshot {
        // The engine's evidence already holds the checks' outcomes and whether the event log
        // can be read (a predicate that needs it is undecidable while it cannot, never "no run
        // recorded"): the snapshot shares it as it is.
        let evidence: Vec<(String, Arc<Evidence>)> = self
            .config
            .jobs
            .iter()
            .zip(&self.evidence)
            .map(|(job, seen)| (job.id.clone(), seen.clone()))
            .collect();
        let samples: Vec<&[(DateTime<Utc>, u64)]> = self
            .config
            .jobs
            .iter()
            .map(|job| self.samples.get(&job.id).map_or(&[][..], Vec::as_slice))
            .collect();
        let watcher = self.watcher.at(now);
        let rules = watcher
            .broken_rule(now)
            .into_iter()
            .chain(self.store_writes_failing.clone())
            .chain(self.textfile_refusal.clone())
            .chain(self.config_refusal.as_ref().map(|(_, rule)| rule.clone()))
            .collect();
        let mut snapshot = Snapshot::judge_by_id(&self.config.jobs, evidence, &samples, rules, now);
        snapshot.notices = self.store_notice.iter().cloned().collect();
        if self.say_counts_fault {
            snapshot.notices.extend(self.counts_fault.iter().cloned());
        }
        snapshot.store_fault = self.store_fault.clone();
        snapshot.store_writes_failing = self.store_writes_failing.clone();
        snapshot.config_refused = self.config_refusal.as_ref().map(|(words, _)| words.clone());
        if let Some(notice) = watcher.notice(&self.config.settings.state_dir) {
            snapshot.notices.insert(0, notice);
        }
        snapshot.watcher = watcher;
        snapshot
    }

    /// Every file whose change can change a verdict: locks, logs, progress files, SQLite
    /// databases with their journals, manifests. Watch their folders, not the files, so
    /// rotation and atomic replace are followed.
    pub fn watched_paths(&self) -> Vec<&Path> {
        self.paths.paths().collect()
    }

    /// The watched paths whose change is only ever a job writing on ([`Sources::GROWTH`]),
    /// for every job that declares them.
    pub fn growth_paths(&self) -> impl Iterator<Item = &Path> {
        self.paths.paths().filter(|path| {
            self.paths
                .owners(path)
                .all(|(_, sources)| Sources::GROWTH.contains(sources))
        })
    }

    /// The jobs a changed path belongs to: one lookup, whatever the number of jobs.
    pub fn jobs_touching(&self, path: &Path) -> Vec<String> {
        self.sources_touching(path).map(|(id, _)| id).collect()
    }

    /// The jobs a changed path belongs to, with the sources of each it feeds.
    pub fn sources_touching<'a>(
        &'a self,
        path: &'a Path,
    ) -> impl Iterator<Item = (String, Sources)> + 'a {
        self.paths
            .owners(path)
            .filter_map(|(at, sources)| Some((self.config.jobs.get(at)?.id.clone(), sources)))
    }

    /// The live holders of every lock seen (a job's lock and its resource lock), as
    /// (PID, start ticks): wait on their exit rather than polling for it.
    pub fn live_holders(&self) -> Vec<(u32, u64)> {
        let mut holders = BTreeSet::new();
        for seen in &self.evidence {
            for reading in [
                seen.lock.as_ref(),
                seen.resource_lock.as_deref(),
                seen.kept_lock.as_deref(),
            ]
            .into_iter()
            .flatten()
            {
                if let Reading::Found(holder) = reading
                    && holder.liveness == Liveness::Alive
                    && let (Some(pid), Some(ticks)) = (holder.pid, holder.start_ticks)
                {
                    holders.insert((pid, ticks));
                }
            }
            // A process found by its command line: its exit is news as a lock holder's is.
            if let Some(Reading::Found(matches)) = &seen.process {
                holders.extend(matches.iter().map(|m| (m.pid, m.start_ticks)));
            }
        }
        // The watcher's death is news too: the dashboard must say at once that nothing watches.
        if let WatcherStatus::Alive { pid, .. } = self.watcher
            && let Reading::Found(holder) = crate::probe::lock::read_lock_as(
                &self.watch_lock_path(),
                crate::probe::safe_open::Role::WatchLock,
            )
            && holder.pid == Some(pid)
            && let Some(ticks) = holder.start_ticks
        {
            holders.insert((pid, ticks));
        }
        holders.into_iter().collect()
    }

    /// The jobs found by their command line (`process`) or run by Slurm (`slurm`): a process
    /// that starts, or a Slurm job that changes state, is no file event, so the live loop
    /// looks for them again every little while (one `squeue` for all Slurm jobs).
    pub fn process_jobs(&self) -> Vec<String> {
        self.config
            .jobs
            .iter()
            .filter(|job| job.process.is_some() || job.slurm.is_some())
            .map(|job| job.id.clone())
            .collect()
    }

    /// The machine watcher's lock in `state_dir`.
    pub fn watch_lock_path(&self) -> PathBuf {
        self.config.settings.state_dir.join(record::WATCH_LOCK)
    }

    /// The live watcher's PID, as last read.
    pub fn watcher_pid(&self) -> Option<u32> {
        match self.watcher {
            WatcherStatus::Alive { pid, .. } => Some(pid),
            _ => None,
        }
    }

    /// Whether a machine watcher watches, as last read.
    pub fn watcher(&self) -> &WatcherStatus {
        &self.watcher
    }

    /// The digests for the operator's digest view: the newest not yet delivered, up to
    /// `shown` cut before it, the queue not cut yet, and the events of `kinds` (at most
    /// `events` of them) by the digest whose day they fell in (`None`: since the last cut).
    /// Each digest's day runs from the cut before it (or a day before it) to its own cut.
    pub fn digest_days(
        &self,
        kinds: &[&str],
        shown: usize,
        events: usize,
    ) -> Result<DigestDays, String> {
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| "the state store is unavailable".to_string())?;
        let all = store.digests(true).map_err(|e| e.to_string())?;
        let pending = store.pending_digest().map_err(|e| e.to_string())?;
        let latest = all.iter().find(|d| d.delivered.is_none()).cloned();
        let previous: Vec<_> = all
            .iter()
            .filter(|d| latest.as_ref().is_none_or(|l| d.cut < l.cut))
            .cloned()
            .collect();
        let mut cuts: Vec<(i64, DateTime<Utc>)> = all.iter().map(|d| (d.id, d.cut)).collect();
        cuts.sort_by_key(|(_, cut)| *cut);
        let day = chrono::Duration::days(1);
        let oldest = cuts
            .get(cuts.len().saturating_sub(shown + 1))
            .map_or(Utc::now() - day, |(_, cut)| *cut - day);
        let mut happened: HashMap<Option<i64>, Vec<Event>> = HashMap::new();
        let found = store.events(&EventFilter {
            since: Some(oldest),
            last: Some(events),
            ..EventFilter::default()
        });
        if let Ok(found) = found {
            for event in found
                .into_iter()
                .filter(|e| kinds.contains(&e.kind.as_str()))
            {
                let window = cuts.iter().enumerate().find(|(at, (_, cut))| {
                    let start = if *at == 0 { *cut - day } else { cuts[at - 1].1 };
                    event.at > start && event.at <= *cut
                });
                let key = match window {
                    Some((_, (id, _))) => Some(*id),
                    None if cuts.last().is_none_or(|(_, cut)| event.at > *cut) => None,
                    None => continue,
                };
                happened.entry(key).or_default().push(event);
            }
        }
        Ok(DigestDays {
            latest,
            previous,
            pending,
            happened,
        })
    }

    /// Marks digest `id` read for the operator (`digest-delivered`): whether it was unread
    /// until now; an error in words when the store cannot be written.
    pub fn mark_digest_read(&self, id: i64) -> Result<bool, String> {
        Store::open(&self.config.settings.state_dir, Actor::Operator)
            .and_then(|mut store| store.mark_digest_delivered(id))
            .map_err(|e| e.to_string())
    }

    /// The state store this engine reads, when it could be opened.
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// The jobs whose lock or resource lock is held by `pid`.
    pub fn jobs_held_by(&self, pid: u32) -> Vec<String> {
        self.config
            .jobs
            .iter()
            .zip(&self.evidence)
            .filter(|(_, seen)| {
                [
                    seen.lock.as_ref(),
                    seen.resource_lock.as_deref(),
                    seen.kept_lock.as_deref(),
                ]
                .into_iter()
                .flatten()
                .any(|r| r.found().is_some_and(|h| h.pid == Some(pid)))
                    || seen
                        .process
                        .as_ref()
                        .and_then(|r| r.found())
                        .is_some_and(|found| found.iter().any(|m| m.pid == pid))
            })
            .map(|(job, _)| job.id.clone())
            .collect()
    }

    /// The next moment a job's verdict can change by time alone: a running job's stall
    /// deadline, a scheduled job's due time passing, or a check falling due. `None` when
    /// nothing changes until something happens.
    pub fn next_job_deadline(&self, snapshot: &Snapshot) -> Option<DateTime<Utc>> {
        let mut next: Option<DateTime<Utc>> = None;
        let checks_full = self.checks_out.len() >= checks::in_flight_limit();
        // Only moments still ahead: one already past changed its verdict at this judgment,
        // and waking for it again would spin.
        let mut consider = |at: DateTime<Utc>| {
            if at > snapshot.generated_at && next.is_none_or(|n| at < n) {
                next = Some(at);
            }
        };
        // Looked up by id once: a search per job would make this quadratic in the jobs.
        let rows: HashMap<&str, &Assessment> = snapshot
            .list
            .rows()
            .map(|row| (row.id.as_str(), row))
            .collect();
        let evidence: HashMap<&str, &Evidence> = snapshot
            .evidence
            .iter()
            .map(|(id, seen)| (id.as_str(), &**seen))
            .collect();
        for job in self.config.jobs.iter() {
            let Some(&row) = rows.get(job.id.as_str()) else {
                continue;
            };
            // A running job (or one running without a declared lock) stalls when its
            // freshest reading passes stall_sec; a millisecond later the verdict flips.
            if row.state == State::Running
                && let Some(age) = row.progress_age_sec
                && let Some(stall_sec) = job.stall_limit()
            {
                let left_ms = (stall_sec as f64 - age) * 1000.0;
                let at =
                    snapshot.generated_at + Duration::milliseconds(left_ms.max(0.0) as i64 + 1);
                consider(at);
            }
            // A scheduled job turns overdue by time alone, the moment its grace ends: the
            // watcher wakes then, with no polling in between.
            if let Some(due) = row.next_due {
                consider(due + Duration::milliseconds(1));
            }
            // A live holder is looked at again when its look is due; one not looked at yet,
            // once its other progress has been quiet for half of stall_sec.
            if let Some(looked) = self.looked.get(&job.id) {
                consider(looked.next_at);
            } else if row.state == State::Running
                && row.liveness == Some(Liveness::Alive)
                && (job.lock.is_some() || job.process.is_some())
                && let Some(age) = row.progress_age_sec
                && let Some(stall_sec) = job.stall_limit()
            {
                let left_ms = (stall_sec as f64 / 2.0 - age) * 1000.0;
                consider(
                    snapshot.generated_at + Duration::milliseconds(left_ms.max(0.0) as i64 + 1),
                );
            }
            if let Some(&seen) = evidence.get(job.id.as_str()) {
                // A bare marker turns stale by time alone, when it passes stale_after_sec.
                for (spec, reading) in job.markers.iter().zip(&seen.markers) {
                    if let Reading::Found(marker) = reading
                        && marker.holder.is_none()
                    {
                        consider(
                            marker.modified
                                + Duration::seconds(
                                    spec.stale_after_sec.min(i64::MAX as u64 / 1000) as i64,
                                )
                                + Duration::milliseconds(1),
                        );
                    }
                }
                let history = &seen.history;
                let timeouts = &job.timeouts;
                if row.state == State::ShouldBeRunning
                    && let (Some(limit), Some(since)) = (timeouts.queue_sec, history.waiting_since)
                {
                    consider(since + Duration::seconds(limit as i64) + Duration::milliseconds(1));
                }
                if matches!(row.state, State::Running | State::Stalled) {
                    for (limit, started) in [
                        (timeouts.attempt_sec, history.attempt_started),
                        (timeouts.total_sec, history.run_started),
                    ] {
                        if let (Some(limit), Some(started)) = (limit, started) {
                            let held = crate::core::assess::approval_wait_sec(
                                &history.approval_waits,
                                started,
                                snapshot.generated_at,
                            );
                            let at = started
                                + Duration::seconds(limit as i64)
                                + Duration::milliseconds((held * 1000.0) as i64 + 1);
                            consider(at);
                        }
                    }
                }
            }
            for check in &job.checks {
                let key = (job.id.clone(), check.name.clone());
                // A check that is out reports back by itself; one never run is due now. While
                // as many are out as may be, the next result to come back is the next moment.
                if checks_full || self.checks_out.contains(&key) {
                    continue;
                }
                match self.checks.get(&key) {
                    Some(last) => consider(last.at + every(check)),
                    None => consider(snapshot.generated_at),
                }
            }
        }
        next
    }

    /// The next moment a verdict can change by time alone: [`Engine::next_job_deadline`], or a
    /// live watcher that records no pass turning stuck.
    pub fn next_deadline(&self, snapshot: &Snapshot) -> Option<DateTime<Utc>> {
        [
            self.next_job_deadline(snapshot),
            self.watcher_deadline(snapshot),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When a live watcher that records no pass turns stuck by time alone. Apart from the
    /// jobs' moments: a beat moves it with no new judgment of any job.
    pub fn watcher_deadline(&self, snapshot: &Snapshot) -> Option<DateTime<Utc>> {
        self.watcher
            .turns_stuck_at()
            .filter(|at| *at > snapshot.generated_at)
    }

    fn config_folder(&self) -> PathBuf {
        self.config
            .source
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))
    }
}

/// The longest a pass that file events ask for uses the store's part as last read, before it
/// reads it again: what the store says by time alone (a spawn leaving the day's window) is
/// never older than this.
const STORE_VIEW_KEPT: Duration = Duration::seconds(30);

/// The fewest jobs to gather whose locks are read on several threads: below it, starting the
/// threads costs about what they save.
const LOCKS_ON_THREADS_FROM: usize = 256;

/// The most threads that read locks.
const LOCK_THREADS: usize = 4;

/// The lock reading of each job `wanted` marks (`None` for the others, and for a job that
/// declares no lock), in jobs-file order. Reading a lock and judging its holder in `/proc` is
/// a third of a farm's pass and needs nothing but the path, so a large pass spreads it over
/// the machine's cores; each thread judges each folder once, as a pass does.
fn read_locks(jobs: &[JobSpec], wanted: &[bool]) -> Vec<Option<Reading<crate::core::LockHolder>>> {
    let alone = |jobs: &[JobSpec], wanted: &[bool]| {
        crate::probe::safe_open::folders_remembered(|| {
            jobs.iter()
                .zip(wanted)
                .map(|(job, wanted)| wanted.then(|| crate::probe::read_job_lock(job)).flatten())
                .collect::<Vec<_>>()
        })
    };
    let threads = thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(LOCK_THREADS);
    let count = wanted.iter().filter(|wanted| **wanted).count();
    if threads < 2 || count < LOCKS_ON_THREADS_FROM {
        return alone(jobs, wanted);
    }
    let chunk = jobs.len().div_ceil(threads);
    thread::scope(|scope| {
        // A part whose thread cannot be started (the user's process limit reached) is read
        // here, in its turn: a refused thread must not end the pass.
        let parts: Vec<_> = jobs
            .chunks(chunk)
            .zip(wanted.chunks(chunk))
            .map(|(jobs, wanted)| {
                let part = thread::Builder::new().spawn_scoped(scope, move || alone(jobs, wanted));
                (jobs, wanted, part.ok())
            })
            .collect();
        parts
            .into_iter()
            // A thread that could not finish: its part is read again here.
            .flat_map(|(jobs, wanted, part)| match part {
                Some(part) => part.join().unwrap_or_else(|_| alone(jobs, wanted)),
                None => alone(jobs, wanted),
            })
            .collect()
    })
}

/// The latest outcome of each of `job`'s checks that has one, in the order the jobs file
/// declares them.
fn outcomes_of(
    checks: &HashMap<(String, String), CheckOutcome>,
    job: &JobSpec,
) -> Vec<CheckOutcome> {
    job.checks
        .iter()
        .filter_map(|c| checks.get(&(job.id.clone(), c.name.clone())).cloned())
        .collect()
}

/// The evidence that calls for a restart, in words that two observers of the same situation
/// write identically: for a dead lock, its holder and its file; otherwise what the job last
/// left behind, and when it was last started (from the shared record), so a job that is
/// started again and stops again without touching its files is a new situation, not a
/// duplicate of the last one. It becomes the claim key, so it holds no clock reading of the
/// observer.
fn restart_evidence(row: &Assessment, seen: &Evidence) -> String {
    // The Slurm job that ended (its id, requeue count and end): two watchers that see the
    // same end claim the same key.
    if let Some(Reading::Found(held)) = seen.slurm.as_deref() {
        return format!(
            "{} {} ended {}",
            held.run_key(),
            held.state,
            held.ended.map_or("-".to_string(), |t| t
                .format("%Y-%m-%dT%H:%M:%SZ")
                .to_string())
        );
    }
    if let Some(Reading::Found(holder)) = &seen.lock {
        return format!(
            "lock held by dead pid {}, start {}, written {}",
            holder.pid.map_or("?".to_string(), |p| p.to_string()),
            holder
                .recorded_start
                .map_or("?".to_string(), |t| t.to_string()),
            holder.modified.format("%Y-%m-%dT%H:%M:%S%.9fZ")
        );
    }
    let stamp = |at: Option<DateTime<Utc>>| {
        at.map_or("-".to_string(), |t| {
            t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
        })
    };
    format!(
        "{} with {} done; log {}; progress {}; table {}; manifest {}; last started {}",
        row.state.as_str(),
        row.done.map_or("?".to_string(), |d| d.to_string()),
        stamp(
            seen.log
                .as_ref()
                .and_then(|r| r.found())
                .map(|f| f.modified)
        ),
        stamp(
            seen.progress_file
                .as_ref()
                .and_then(|r| r.found())
                .map(|f| f.modified)
        ),
        stamp(
            seen.progress_table
                .as_ref()
                .and_then(|r| r.found())
                .map(|t| t.newest)
        ),
        stamp(
            seen.manifest
                .as_ref()
                .and_then(|r| r.found())
                .map(|m| m.updated_at)
        ),
        stamp(seen.history.attempt_started),
    )
}

/// The approval or denial of one pending request, as its dialog shows it.
fn approval_decision(
    action: Action,
    id: &str,
    pending: &crate::core::PendingApproval,
) -> Result<Decision, String> {
    let plan = ApprovalPlan {
        job: id.to_string(),
        key: pending.key.clone(),
        step: pending.step.clone(),
        summary: pending.summary.clone(),
        reason: None,
        requested_by: pending.requested_by.clone(),
        requested: pending.requested,
    };
    Ok(if action == Action::Deny {
        Decision::Deny(plan)
    } else {
        Decision::Approve(plan)
    })
}

/// A pause, a resume or an acknowledgement of `row`, decided by `by`, or why it says
/// nothing: a pause of a paused job, a resume of one not paused, an acknowledgement of a job
/// with no broken rule standing.
fn propose_note(action: Action, row: &Assessment, by: &str) -> Result<Decision, String> {
    let id = row.id.as_str();
    let plan = |about: Vec<String>| NotePlan::new(id, action.verb(), row.state, about, by);
    match action {
        Action::Pause => match &row.paused {
            Some(pause) => Err(format!(
                "'{id}' is already paused (by {} at {}: {})",
                pause.by,
                pause.at.format("%Y-%m-%d %H:%M:%S UTC"),
                pause.reason
            )),
            None => Ok(Decision::Pause(plan(
                row.reasons.first().cloned().into_iter().collect(),
            ))),
        },
        Action::Resume => match &row.paused {
            Some(pause) => Ok(Decision::Resume(plan(vec![format!(
                "by {} at {}: {}",
                pause.by,
                pause.at.format("%Y-%m-%d %H:%M:%S UTC"),
                pause.reason
            )]))),
            None => Err(format!("'{id}' is not paused: nothing to resume")),
        },
        _ => {
            let rules: Vec<String> = row
                .reasons
                .iter()
                .filter_map(|r| r.strip_prefix("rule broken: "))
                .map(str::to_string)
                .collect();
            if rules.is_empty() {
                return Err(format!(
                    "'{id}' has no broken rule to acknowledge (a failing check ends when it \
                     passes)"
                ));
            }
            Ok(Decision::Acknowledge(plan(rules)))
        }
    }
}

fn propose_release(
    job: &JobSpec,
    row: &Assessment,
    seen: &Evidence,
) -> Result<ReleasePlan, String> {
    if let Some(why) = release_refusal(row) {
        return Err(why);
    }
    let (Some(path), Some(Reading::Found(holder))) = (&job.lock, &seen.lock) else {
        return Err(format!("'{}' has no lock file to release", job.id));
    };
    let identity = crate::effect::release::identity(path)?;
    Ok(ReleasePlan {
        job: job.id.clone(),
        key: claim_key(
            &job.id,
            "release",
            &format!(
                "{}:{}:{}:{}",
                identity.dev, identity.ino, identity.mtime_ns, identity.content
            ),
        ),
        path: path.clone(),
        identity,
        holder: HolderView {
            pid: holder.pid,
            liveness: holder.liveness,
            why: holder.why.clone(),
        },
    })
}

fn every(check: &CheckSpec) -> Duration {
    Duration::seconds(check.every_sec.min(i64::MAX as u64) as i64)
}

/// Every file a job declares, with a SQLite database's journal and WAL files (a commit in WAL
/// mode touches only the `-wal` file), and the log's first rotated name (`NAME.1`): a writer
/// that has not reopened its log since a rename still writes there. Each with the sources it
/// feeds, so that a change to it re-reads those alone.
pub fn job_paths(job: &JobSpec) -> Vec<(PathBuf, Sources)> {
    let mut paths: Vec<(PathBuf, Sources)> = [
        (&job.lock, Sources::LOCK),
        (&job.log, Sources::LOG),
        (&job.progress_file, Sources::PROGRESS_FILE),
        (&job.manifest, Sources::MANIFEST),
        (&job.resource_lock, Sources::RESOURCE_LOCK),
        (&job.kept_lock, Sources::KEPT_LOCK),
    ]
    .into_iter()
    .filter_map(|(path, sources)| Some((path.clone()?, sources)))
    .chain(
        job.markers
            .iter()
            .map(|marker| (marker.path.clone(), Sources::MARKERS)),
    )
    .collect();
    if let Some(log) = &job.log {
        let mut rotated = log.clone().into_os_string();
        rotated.push(".1");
        paths.push((PathBuf::from(rotated), Sources::LOG));
    }
    if let Some(table) = &job.progress_table {
        paths.push((table.db.clone(), Sources::PROGRESS_TABLE));
        for suffix in ["-wal", "-journal"] {
            let mut name = table.db.clone().into_os_string();
            name.push(suffix);
            paths.push((PathBuf::from(name), Sources::PROGRESS_TABLE));
        }
    }
    paths
}

/// Which jobs (by position in the jobs file) declare each path of [`job_paths`], and which of
/// their sources it feeds: one sorted list of (path, job, sources), searched by halves. A
/// farm's paths are nearly all one job's each, and a map from each path to a list of its jobs
/// held a table, a list and its slack for every one (7.7 MB at 10,000 jobs, against 3.8 MB).
#[derive(Debug, Default)]
struct PathIndex {
    /// In byte order of the path, then by job; each (path, job) once, its sources merged.
    owners: Vec<(PathBuf, u32, Sources)>,
}

impl PathIndex {
    /// Byte order costs a memcmp, where a path's own order walks components.
    fn key(path: &Path) -> &[u8] {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes()
    }

    /// The jobs that declare `path`, in jobs-file order, with the sources it feeds.
    fn owners<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = (usize, Sources)> + 'a {
        let key = Self::key(path);
        let first = self.owners.partition_point(|(p, _, _)| Self::key(p) < key);
        self.owners[first..]
            .iter()
            .take_while(move |(p, _, _)| Self::key(p) == key)
            .map(|&(_, at, sources)| (at as usize, sources))
    }

    /// Every path once, in byte order: any fixed order does, so which folders get the last
    /// watches under the limit does not change from one call to the next.
    fn paths(&self) -> impl Iterator<Item = &Path> {
        let mut last: Option<&Path> = None;
        self.owners.iter().filter_map(move |(path, _, _)| {
            let new = last != Some(path.as_path());
            last = Some(path);
            new.then_some(path.as_path())
        })
    }
}

fn path_index(jobs: &[JobSpec]) -> PathIndex {
    let mut owners: Vec<(PathBuf, u32, Sources)> = jobs
        .iter()
        .enumerate()
        .flat_map(|(at, job)| {
            let at = u32::try_from(at).unwrap_or(u32::MAX);
            job_paths(job)
                .into_iter()
                .map(move |(path, sources)| (path, at, sources))
        })
        .collect();
    owners.sort_unstable_by(|(a, i, _), (b, j, _)| {
        PathIndex::key(a).cmp(PathIndex::key(b)).then(i.cmp(j))
    });
    // One path may feed several sources of one job (a lock that is also its resource lock).
    owners.dedup_by(|(path, at, sources), (kept_path, kept_at, kept)| {
        let same = path == kept_path && at == kept_at;
        if same {
            *kept |= *sources;
        }
        same
    });
    owners.shrink_to_fit();
    PathIndex { owners }
}

/// Checks run in the job's `restart.cwd`, else in the jobs file's folder.
fn check_folder(job: &JobSpec, default: &Path) -> PathBuf {
    job.restart
        .as_ref()
        .and_then(|r| r.cwd.clone())
        .unwrap_or_else(|| default.to_path_buf())
}

/// How long a store that could not be opened, or was found damaged, waits before it is
/// opened again.
const STORE_RETRY: Duration = Duration::seconds(10);

/// What opening the state store came to: the store, or why not.
struct StoreOpening {
    store: Option<Store>,
    fault: Option<String>,
    notice: Option<String>,
}

/// Opens the store in `state_dir` and checks the whole file once. One that exists (or whose
/// identity says it existed) and cannot be used is a fault; a store that does not exist and
/// cannot be made there is only a notice, for nothing recorded is hidden by it.
fn open_store(state_dir: &Path) -> StoreOpening {
    let opened =
        Store::open(state_dir, Actor::Cli).and_then(|store| store.verify().map(|()| store));
    match opened {
        Ok(store) => StoreOpening {
            store: Some(store),
            fault: None,
            notice: None,
        },
        Err(error) => {
            let words = store_error_words(state_dir, &error);
            let db = state_dir.join(crate::store::DB_FILE);
            let there = [db.clone(), crate::store::identity::file_of(&db)]
                .iter()
                .any(|path| std::fs::symlink_metadata(path).is_ok());
            if error.fault() == Fault::Other && !there {
                StoreOpening {
                    store: None,
                    fault: None,
                    notice: Some(format!(
                        "state store unavailable ({words}): heartbeats, approvals and past \
                         starts are not shown"
                    )),
                }
            } else {
                StoreOpening {
                    store: None,
                    fault: Some(words),
                    notice: None,
                }
            }
        }
    }
}

/// An error of the kernel's reading, inert.
fn inert_words(error: &str) -> String {
    crate::core::text::inert(error)
}

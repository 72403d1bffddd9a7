//! The watcher's hand on the state store: every write the watcher makes goes through
//! [`Recorder`], and none is dropped without a word.
//!
//! A write that fails (a full disk, a damaged store, a permission lost) is told at once on
//! stderr — the journal under systemd — with its cause in the operator's words and what to
//! do; the watcher's health file tells `check` and the dashboard (a RED rule, "store writes
//! failing"), and [`Recorder::take_untold`] hands the watcher the rule to escalate through
//! its usual path. What could not be written is kept in memory, in order, up to [`KEPT`]
//! writes, and written as soon as the store takes writes again — events with the time they
//! happened — followed by one event summing up the outage; what did not fit is counted in
//! that summary. It decides nothing, and it reads nothing: the watcher reads the [`Store`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};

use crate::store::digest::DigestCategory;
use crate::store::health::{HealthFile, WriteHealth};
use crate::store::{Fault, Kind, NewEvent, Store, StoreError};

/// How many writes are kept in memory while the store takes none; later ones are counted.
pub const KEPT: usize = 1_000;
/// How long after a failure the store is tried again, with nothing else to write.
const RETRY: Duration = Duration::seconds(5);
/// Failed writes told one by one on stderr in an outage; after that, every hundredth.
const TOLD_ONE_BY_ONE: u64 = 20;

/// What cutting the digest came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// A new digest, with its id.
    Made(i64),
    /// Nothing was queued: no digest.
    Empty,
    /// The store took no write (told already): cut again later.
    Failed,
}

/// One write the watcher makes.
#[derive(Debug, Clone)]
enum Write {
    Event {
        event: NewEvent,
        at: DateTime<Utc>,
    },
    Digest {
        job: Option<String>,
        category: DigestCategory,
        text: String,
        at: DateTime<Utc>,
    },
    MarkEscalated {
        job: String,
        kind: String,
    },
    CloseEpisode {
        job: String,
        kind: String,
    },
}

impl Write {
    fn apply(&self, store: &mut Store) -> Result<(), StoreError> {
        match self {
            Write::Event { event, at } => store.append_at(event.clone(), *at).map(drop),
            Write::Digest {
                job,
                category,
                text,
                at,
            } => store
                .queue_digest_at(*at, job.as_deref(), *category, text)
                .map(drop),
            Write::MarkEscalated { job, kind } => store.mark_escalated(job, kind),
            Write::CloseEpisode { job, kind } => store.close_episode(job, kind).map(drop),
        }
    }

    /// What it is, in a few words for stderr.
    fn what(&self) -> String {
        let of = |job: &Option<String>| match job {
            Some(job) => format!(" of '{}'", crate::core::text::inert(job)),
            None => String::new(),
        };
        match self {
            Write::Event { event, .. } => format!(
                "event '{}'{}",
                event.kind.map_or("?", Kind::as_str),
                of(&event.job)
            ),
            Write::Digest { job, .. } => format!("a digest item{}", of(job)),
            Write::MarkEscalated { job, kind } => {
                format!("escalation '{kind}'{} marked told", of(&Some(job.clone())))
            }
            Write::CloseEpisode { job, kind } => {
                format!("escalation '{kind}'{} ended", of(&Some(job.clone())))
            }
        }
    }
}

/// A stretch of time in which the store took no write of the watcher's.
#[derive(Debug)]
struct Outage {
    since: DateTime<Utc>,
    last: DateTime<Utc>,
    failed: u64,
    /// Writes kept for later over the whole outage (some may be recorded already).
    kept_total: u64,
    lost: u64,
    cause: String,
    /// A short label of the cause for the summary event ("disk full").
    label: &'static str,
    retry_at: DateTime<Utc>,
}

/// The watcher's store, with what it could not record yet.
#[derive(Debug)]
pub struct Recorder {
    store: Store,
    state_dir: PathBuf,
    kept: VecDeque<Write>,
    outage: Option<Outage>,
    health: Option<HealthFile>,
    /// Whether the current outage's rule was handed to the watcher to escalate.
    told: bool,
}

impl Recorder {
    /// Writes through `store`, whose folder is `state_dir`; makes the health file there.
    pub fn new(store: Store, state_dir: &Path) -> Recorder {
        let health = match HealthFile::create(state_dir, &ok_health()) {
            Ok(file) => Some(file),
            Err(error) => {
                eprintln!(
                    "mihari watch: cannot write the watcher's health file '{}': {error}; \
                     check and the dashboard will not see this watcher's failed writes",
                    crate::store::health::path_in(state_dir).display()
                );
                None
            }
        };
        Recorder {
            store,
            state_dir: state_dir.to_path_buf(),
            kept: VecDeque::new(),
            outage: None,
            health,
            told: true,
        }
    }

    /// The store, for reading.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store itself, for the recovery pass, which records its own resolutions.
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Appends an event, timed now.
    pub fn append(&mut self, event: NewEvent) {
        self.write(Write::Event {
            event,
            at: Utc::now(),
        });
    }

    /// Queues an item for the digest, timed now.
    pub fn queue_digest(&mut self, job: Option<&str>, category: DigestCategory, text: &str) {
        self.write(Write::Digest {
            job: job.map(str::to_string),
            category,
            text: text.to_string(),
            at: Utc::now(),
        });
    }

    /// Queues an item for the digest, timed `at` (the moment of the cut it belongs in).
    pub fn queue_digest_at(
        &mut self,
        at: DateTime<Utc>,
        job: Option<&str>,
        category: DigestCategory,
        text: &str,
    ) {
        self.write(Write::Digest {
            job: job.map(str::to_string),
            category,
            text: text.to_string(),
            at,
        });
    }

    /// Notes that the open episode of (`job`, `kind`) was told.
    pub fn mark_escalated(&mut self, job: &str, kind: &str) {
        self.write(Write::MarkEscalated {
            job: job.to_string(),
            kind: kind.to_string(),
        });
    }

    /// Ends the open episode of (`job`, `kind`).
    pub fn close_episode(&mut self, job: &str, kind: &str) {
        self.write(Write::CloseEpisode {
            job: job.to_string(),
            kind: kind.to_string(),
        });
    }

    /// Opens an episode unless one is open: `true` when the caller must tell a human. When
    /// the store cannot say (it takes no write), the answer is `true`: telling twice is
    /// better than never. Its answer is needed now, so it is not kept for later.
    pub fn open_episode(&mut self, job: &str, kind: &str, message: &str) -> bool {
        let now = Utc::now();
        self.flush(now);
        if !self.kept.is_empty() {
            return true;
        }
        match self.store.open_episode(job, kind, message) {
            Ok(opened) => {
                self.recovered(now);
                opened
            }
            Err(error) => {
                self.failed(
                    None,
                    Some(&error),
                    now,
                    &format!("escalation '{kind}' opened"),
                );
                true
            }
        }
    }

    /// Cuts the digest at `now`.
    pub fn cut_digest(&mut self, now: DateTime<Utc>) -> Cut {
        self.flush(Utc::now());
        if !self.kept.is_empty() {
            return Cut::Failed;
        }
        match self.store.cut_digest(now) {
            Ok(cut) => {
                self.recovered(Utc::now());
                cut.map_or(Cut::Empty, Cut::Made)
            }
            Err(error) => {
                self.failed(None, Some(&error), Utc::now(), "the digest's cut");
                Cut::Failed
            }
        }
    }

    /// Tries the store again: what was kept is written, and an outage with nothing left
    /// kept ends with its summary.
    pub fn retry(&mut self, now: DateTime<Utc>) {
        if self.outage.is_some() {
            self.flush(now);
            if self.kept.is_empty() {
                self.recovered(now);
            }
        }
    }

    /// The watcher ends: one last try, and what still could not be written is told lost.
    pub fn finish(&mut self) {
        if let Some(outage) = &mut self.outage {
            outage.retry_at = Utc::now();
        }
        self.retry(Utc::now());
        if let Some(outage) = &self.outage {
            eprintln!(
                "mihari watch: {} writes since {} could not be recorded before the watcher \
                 ended and are lost: {}",
                self.kept.len() as u64 + outage.lost,
                outage.since.format("%Y-%m-%d %H:%M:%S UTC"),
                outage.cause
            );
        }
    }

    /// When the store must be tried again though nothing else is written.
    pub fn retry_at(&self) -> Option<DateTime<Utc>> {
        self.outage.as_ref().map(|o| o.retry_at)
    }

    /// Whether the store takes no write of the watcher's now.
    pub fn failing(&self) -> bool {
        self.outage.is_some()
    }

    /// The broken rule while writes fail: RED, "store writes failing: ...".
    pub fn rule(&self) -> Option<String> {
        self.health_now().rule()
    }

    /// The rule of an outage that has not been handed out yet, once per outage: for the
    /// watcher to escalate at once, not at its next pass.
    pub fn take_untold(&mut self) -> Option<String> {
        if self.told {
            return None;
        }
        self.told = true;
        self.rule()
    }

    /// Writes `write`, after whatever was kept; keeps it when the store takes nothing.
    fn write(&mut self, write: Write) {
        let now = Utc::now();
        self.flush(now);
        if !self.kept.is_empty() {
            // The store took none of the older ones: this one waits behind them, in order.
            let what = write.what();
            self.failed(Some(write), None, now, &what);
            return;
        }
        match write.apply(&mut self.store) {
            Ok(()) => self.recovered(now),
            Err(error) => {
                let what = write.what();
                self.failed(Some(write), Some(&error), now, &what);
            }
        }
    }

    /// Writes what was kept, oldest first, until the store refuses one.
    fn flush(&mut self, now: DateTime<Utc>) {
        if self.outage.as_ref().is_some_and(|o| now < o.retry_at) && !self.kept.is_empty() {
            return;
        }
        while let Some(write) = self.kept.front() {
            match write.apply(&mut self.store) {
                Ok(()) => {
                    self.kept.pop_front();
                }
                Err(error) => {
                    let cause = self.cause(&error);
                    if let Some(outage) = &mut self.outage {
                        outage.cause = cause;
                        outage.retry_at = now + RETRY;
                    }
                    self.write_health();
                    return;
                }
            }
        }
    }

    /// Notes a write that failed with `error` (or waits behind older ones, `None`), keeps
    /// `write` for later when given, and tells it.
    fn failed(
        &mut self,
        write: Option<Write>,
        error: Option<&StoreError>,
        now: DateTime<Utc>,
        what: &str,
    ) {
        let (cause, label) = match (error, &self.outage) {
            (None, Some(outage)) => (outage.cause.clone(), outage.label),
            (Some(error), _) => (self.cause(error), self.label(error)),
            (None, None) => (
                "the writes before it are not recorded yet".to_string(),
                "writes failed",
            ),
        };
        let first = self.outage.is_none();
        let outage = self.outage.get_or_insert_with(|| Outage {
            since: now,
            last: now,
            failed: 0,
            kept_total: 0,
            lost: 0,
            cause: cause.clone(),
            label,
            retry_at: now + RETRY,
        });
        outage.failed += 1;
        outage.last = now;
        outage.cause = cause.clone();
        outage.label = label;
        if let Some(write) = write {
            if self.kept.len() < KEPT {
                self.kept.push_back(write);
                outage.kept_total += 1;
            } else {
                outage.lost += 1;
            }
        }
        let failed = outage.failed;
        if first {
            self.told = false;
            eprintln!(
                "mihari watch: not recorded: {what}: {cause}. The watcher keeps what it cannot \
                 record (up to {KEPT} writes) and records it as soon as the store takes writes \
                 again; automatic restarts wait until then"
            );
        } else if failed <= TOLD_ONE_BY_ONE || failed.is_multiple_of(100) {
            eprintln!(
                "mihari watch: not recorded ({failed} since {}, {} kept): {what}",
                self.outage
                    .as_ref()
                    .map_or(now, |o| o.since)
                    .format("%H:%M:%S UTC"),
                self.kept.len()
            );
        }
        self.write_health();
    }

    /// The store took a write: an outage ends, with an event that sums it up.
    fn recovered(&mut self, now: DateTime<Utc>) {
        if !self.kept.is_empty() {
            return;
        }
        let Some(outage) = &self.outage else {
            return;
        };
        let between = format!(
            "between {} and {}",
            outage.since.format("%Y-%m-%d %H:%M:%S UTC"),
            outage.last.format("%Y-%m-%d %H:%M:%S UTC")
        );
        let late = outage.kept_total;
        let reason = if outage.lost > 0 {
            format!(
                "{} events could not be recorded {between}: {}; {late} more writes were \
                 recorded late (events at the time they happened)",
                outage.lost, outage.label
            )
        } else {
            format!(
                "the state store could not be written {between}: {}; {late} writes were \
                 recorded late (events at the time they happened)",
                outage.label
            )
        };
        if let Err(error) = self
            .store
            .append_at(NewEvent::new(Kind::Detected).reason(reason), now)
        {
            let cause = self.cause(&error);
            if let Some(outage) = &mut self.outage {
                outage.cause = cause;
                outage.retry_at = now + RETRY;
            }
            return;
        }
        let lost = outage.lost;
        eprintln!(
            "mihari watch: the state store takes writes again: {late} writes kept since {} are \
             recorded{}",
            outage.since.format("%H:%M:%S UTC"),
            if lost > 0 {
                format!("; {lost} did not fit in memory and are lost (see mihari events)")
            } else {
                String::new()
            }
        );
        self.outage = None;
        self.told = true;
        self.write_health();
    }

    /// Why a write failed, in the operator's words: a full disk named as such, whatever
    /// SQLite called it.
    fn cause(&self, error: &StoreError) -> String {
        if error.fault() == Fault::Full || crate::store::files::no_space_left(&self.state_dir) {
            format!(
                "the disk holding '{}' is full ({error}): free space there",
                self.state_dir.display()
            )
        } else {
            crate::engine::store_error_words(&self.state_dir, error)
        }
    }

    fn label(&self, error: &StoreError) -> &'static str {
        if error.fault() == Fault::Full || crate::store::files::no_space_left(&self.state_dir) {
            "disk full"
        } else if error.fault() == Fault::Damaged {
            "store damaged"
        } else {
            "writes failed"
        }
    }

    fn health_now(&self) -> WriteHealth {
        match &self.outage {
            None => ok_health(),
            Some(outage) => WriteHealth {
                pid: std::process::id(),
                failing_since: Some(outage.since),
                failed: outage.failed,
                kept: self.kept.len(),
                lost: outage.lost,
                cause: Some(outage.cause.clone()),
            },
        }
    }

    fn write_health(&mut self) {
        let health = self.health_now();
        if let Some(file) = &mut self.health
            && let Err(error) = file.write(&health)
        {
            eprintln!(
                "mihari watch: cannot update the watcher's health file '{}': {error}",
                crate::store::health::path_in(&self.state_dir).display()
            );
        }
    }
}

/// What the health file says while writes succeed.
fn ok_health() -> WriteHealth {
    WriteHealth {
        pid: std::process::id(),
        failing_since: None,
        failed: 0,
        kept: 0,
        lost: 0,
        cause: None,
    }
}

//! Probes: the world -> [`Evidence`].
//!
//! Each probe reads one kind of source (file times, progress files, SQLite progress tables,
//! run manifests, locks and `/proc`, checks) and answers a [`Reading`]: found, empty, or a
//! fault with its error. A probe never panics and never returns an `Err` that aborts the
//! whole pass: a failure to read is data. Probes do not judge; `core::assess` does.

pub mod activity;
pub mod checks;
pub mod count;
pub mod files;
pub mod inspect;
pub mod lock;
pub mod log_progress;
pub mod manifest;
pub mod marker;
pub mod meters;
pub mod proc;
pub mod procscan;
pub mod rotation;
pub mod safe_open;
pub mod slurm;
pub mod table;
pub mod tail;
pub mod zone;

use crate::config::JobSpec;
use crate::core::{Evidence, LockHolder, Reading};

pub use count::LineCounter;

/// Which of a job's sources something touched: a file event names one path, and re-reading
/// only what that path feeds (a log's stamp, not the lock, its holder in `/proc` and the
/// progress count beside it) is what keeps a storm of log writes cheap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Sources(u16);

impl Sources {
    pub const NONE: Sources = Sources(0);
    pub const LOCK: Sources = Sources(1);
    pub const RESOURCE_LOCK: Sources = Sources(1 << 1);
    pub const KEPT_LOCK: Sources = Sources(1 << 2);
    /// The log, its rotated predecessors, and `log_progress` read from it.
    pub const LOG: Sources = Sources(1 << 3);
    pub const PROGRESS_FILE: Sources = Sources(1 << 4);
    pub const PROGRESS_TABLE: Sources = Sources(1 << 5);
    pub const MANIFEST: Sources = Sources(1 << 6);
    pub const MARKERS: Sources = Sources(1 << 7);
    /// Everything, the processes found by their command line included: a whole gather.
    pub const ALL: Sources = Sources(u16::MAX);

    /// The sources that name a holder: only a change to one of them (or a whole gather) can
    /// change which processes are waited on.
    pub const HOLDERS: Sources = Sources(1 | 1 << 1 | 1 << 2);

    /// The sources whose change is a job writing on: its log and its progress. In a storm
    /// of them, passes are spaced by their cost; a change to anything else (a lock, a
    /// marker) is judged at the plain pace.
    pub const GROWTH: Sources = Sources(1 << 3 | 1 << 4 | 1 << 5 | 1 << 6);

    pub fn intersects(self, other: Sources) -> bool {
        self.0 & other.0 != 0
    }

    pub fn contains(self, other: Sources) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Sources {
    type Output = Sources;
    fn bitor(self, other: Sources) -> Sources {
        Sources(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for Sources {
    fn bitor_assign(&mut self, other: Sources) {
        self.0 |= other.0;
    }
}

/// Gathers evidence for jobs, remembering what it has counted so far, so that a progress file
/// is counted incrementally (within one process, and across processes from the counts the
/// engine keeps in `state_dir`), and what each log last held, so that a rotation is carried
/// across.
#[derive(Debug, Default)]
pub struct Prober {
    counter: LineCounter,
    /// Each log's last non-empty reading, so that a rotation no predecessor shows is carried.
    logs: rotation::LogMemory,
    /// Every job's `process.cmdline`, compiled into one set.
    matcher: procscan::Matcher,
    /// Whether each log with no `log_progress` ended in a redrawn meter, by the length and time
    /// it had when it was read: read again only when the log changed.
    meters:
        std::collections::HashMap<std::path::PathBuf, ((u64, chrono::DateTime<chrono::Utc>), bool)>,
    /// Every job's `log_progress.pattern`, compiled once, and what each log's reading was at
    /// the last look: a meter that redraws the same figure is not progress.
    log_progress: log_progress::LogProgressReader,
    /// `squeue --json`, and the fault it last gave.
    slurm: slurm::SlurmReader,
    /// The StdOut each Slurm job last had, by mihari job id: still read once Slurm has
    /// forgotten the job (MinJobAge), so that what it printed last still counts.
    slurm_logs: std::collections::HashMap<String, std::path::PathBuf>,
}

impl Prober {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of progress files read for counting since this prober was made: a reload that
    /// keeps a job must not add that job's file again (the evidence tests and benches read).
    pub fn progress_bytes_counted(&self) -> u64 {
        self.counter.bytes_read()
    }

    /// When each log's reading last moved, as far as the looks so far saw: to start from what
    /// an earlier process kept, and to keep it for the next one.
    pub fn log_readings(&mut self) -> &mut log_progress::LogProgressReader {
        &mut self.log_progress
    }

    /// The progress files' line counts: to start from what an earlier process kept, and to
    /// keep them for the next one.
    pub fn counter(&mut self) -> &mut LineCounter {
        &mut self.counter
    }

    /// Reads `/proc` once and matches every job of `jobs` that declares `process` against
    /// it: the part of a pass all those jobs share. Reads nothing when none declares one.
    pub fn scan_processes(&mut self, jobs: &[JobSpec]) -> procscan::ProcessScan {
        self.matcher.scan(jobs)
    }

    /// Runs `squeue --json` once for every job of `jobs` that declares `slurm:`: the part of
    /// a pass those jobs share. Runs nothing when none declares it.
    pub fn scan_slurm(&mut self, jobs: &[JobSpec]) -> slurm::SlurmScan {
        self.slurm.scan(jobs)
    }

    /// Reads every source `job` declares, except its checks (they run on their own schedule,
    /// see [`checks`]). Never fails: a source that cannot be read is a fault in the evidence.
    /// A job declared by `process` costs a scan of `/proc` of its own here: a pass over many
    /// jobs scans once ([`Prober::scan_processes`]) and calls [`Prober::gather_in`].
    pub fn gather(&mut self, job: &JobSpec) -> Evidence {
        let scan = if job.process.is_some() {
            self.matcher.scan(std::slice::from_ref(job))
        } else {
            procscan::ProcessScan::default()
        };
        let slurm = self.slurm.scan(std::slice::from_ref(job));
        self.gather_in(job, &scan, &slurm)
    }

    /// [`Prober::gather`] with the pass's process scan and Slurm's list.
    pub fn gather_in(
        &mut self,
        job: &JobSpec,
        scan: &procscan::ProcessScan,
        slurm: &slurm::SlurmScan,
    ) -> Evidence {
        self.gather_with_lock(job, scan, slurm, read_job_lock(job))
    }

    /// [`Prober::gather_in`] with the job's lock already read ([`read_job_lock`]): a pass over
    /// a farm reads the locks on every core first, for reading a lock and judging its holder
    /// needs nothing this prober keeps.
    pub fn gather_with_lock(
        &mut self,
        job: &JobSpec,
        scan: &procscan::ProcessScan,
        slurm: &slurm::SlurmScan,
        lock: Option<Reading<LockHolder>>,
    ) -> Evidence {
        let resource_lock = match (&job.resource_lock, &job.lock) {
            (Some(resource), Some(own)) if resource == own => None,
            (Some(resource), _) => {
                Some(lock::read_lock_as(resource, safe_open::Role::ResourceLock))
            }
            (None, _) => None,
        };
        let slurm = slurm.reading(job);
        // A Slurm job's StdOut is its log when it declares none (SPEC §12).
        let slurm_log = match (&job.log, &slurm) {
            // Only once it has started: a queued job has written nothing yet.
            (None, Some(Reading::Found(held))) if held.started.is_some() => {
                if let Some(stdout) = &held.stdout {
                    self.slurm_logs.insert(job.id.clone(), stdout.clone());
                }
                held.stdout.clone()
            }
            // Forgotten by Slurm since: the StdOut it last had.
            (None, Some(Reading::Empty)) => self.slurm_logs.get(&job.id).cloned(),
            _ => None,
        };
        let log_path = job.log.as_deref().or(slurm_log.as_deref());
        let log = log_path.map(|path| self.logs.read(path));
        let log_missing = log.as_ref().and_then(|log| log.missing.clone());
        // A log nobody told mihari how to read: is it a meter redrawn in place? Read again only
        // when the log changed since the last look.
        let log_meter = match (&job.log, &job.log_progress, log.as_ref().map(|l| &l.stamp)) {
            (Some(path), None, Some(Reading::Found(stamp))) if stamp.len > 0 => {
                let key = (stamp.len, stamp.modified);
                match self.meters.get(path) {
                    Some((seen, meter)) if *seen == key => *meter,
                    _ => {
                        let meter = log_progress::log_redraws_a_meter(path);
                        self.meters.insert(path.clone(), (key, meter));
                        meter
                    }
                }
            }
            _ => false,
        };
        let process = scan.reading(job);
        Evidence {
            lock,
            resource_lock: resource_lock.map(Box::new),
            log: log.map(|log| log.stamp),
            log_missing,
            log_meter,
            progress_file: job.progress_file.as_deref().map(|p| self.counter.count(p)),
            progress_table: job.progress_table.as_ref().map(table::read_progress_table),
            manifest: job
                .manifest
                .as_deref()
                .map(|path| Box::new(manifest::read_manifest(path))),
            log_progress: match (log_path, &job.log_progress) {
                (Some(log), Some(spec)) => Some(Box::new(self.log_progress.read(log, spec))),
                // A Slurm job whose StdOut is not known. Queued, or Slurm cannot be read
                // (that fault is the holder's, said once): nothing printed yet. Slurm lists
                // no job of it: what it printed cannot be known, never "nothing".
                (None, Some(_)) if job.slurm.is_some() => Some(Box::new(match &slurm {
                    Some(Reading::Empty) => Reading::Fault(
                        "the job's StdOut is not known: Slurm lists no job of it; declare \
                         log to read its output whatever Slurm remembers"
                            .to_string(),
                    ),
                    _ => Reading::Empty,
                })),
                _ => None,
            },
            // The engine fills these from what it kept of earlier passes.
            progress_samples: Vec::new(),
            kept_lock: job
                .kept_lock
                .as_deref()
                // Only asked when no process matches: a match decides without it.
                .filter(|_| !matches!(process, Some(Reading::Found(_))))
                .map(|kept| Box::new(lock::read_lock_as(kept, safe_open::Role::KeptLock))),
            process,
            // The engine looks at a quiet live holder after the gather, with what it kept of
            // earlier looks.
            activity: None,
            slurm: slurm.map(Box::new),
            // The engine fills these from the state store.
            heartbeat: None,
            checks: Vec::new(),
            pending_approvals: Vec::new(),
            started_before: false,
            history: Default::default(),
            markers: job
                .markers
                .iter()
                .map(|marker| marker::read_marker(&marker.path))
                .collect(),
        }
    }
}

impl Prober {
    /// Reads again the `sources` of `job` into `seen`, the job's evidence from its last
    /// gather, and keeps the rest as it was: what a file event names changed, and nothing
    /// else of the job did (a holder's exit is its own trigger, and the processes found by
    /// their command line are looked for on their own timer). `lock` is the lock's reading
    /// when `sources` holds [`Sources::LOCK`]. [`Sources::ALL`] is a whole gather.
    pub fn regather(
        &mut self,
        job: &JobSpec,
        seen: &mut Evidence,
        sources: Sources,
        lock: Option<Reading<LockHolder>>,
    ) {
        if sources.contains(Sources::LOCK) {
            seen.lock = lock;
        }
        if sources.contains(Sources::RESOURCE_LOCK) {
            seen.resource_lock = match (&job.resource_lock, &job.lock) {
                (Some(resource), Some(own)) if resource == own => None,
                (Some(resource), _) => Some(Box::new(lock::read_lock_as(
                    resource,
                    safe_open::Role::ResourceLock,
                ))),
                (None, _) => None,
            };
        }
        if sources.contains(Sources::KEPT_LOCK) {
            seen.kept_lock = job
                .kept_lock
                .as_deref()
                .filter(|_| !matches!(seen.process, Some(Reading::Found(_))))
                .map(|kept| Box::new(lock::read_lock_as(kept, safe_open::Role::KeptLock)));
        }
        if sources.contains(Sources::LOG)
            && let Some(path) = job.log.as_deref()
        {
            let log = self.logs.read(path);
            seen.log_missing = log.missing.clone();
            seen.log = Some(log.stamp);
            if let Some(spec) = &job.log_progress {
                seen.log_progress = Some(Box::new(self.log_progress.read(path, spec)));
            }
        }
        if sources.contains(Sources::PROGRESS_FILE)
            && let Some(path) = job.progress_file.as_deref()
        {
            seen.progress_file = Some(self.counter.count(path));
        }
        if sources.contains(Sources::PROGRESS_TABLE) {
            seen.progress_table = job.progress_table.as_ref().map(table::read_progress_table);
        }
        if sources.contains(Sources::MANIFEST) {
            seen.manifest = job
                .manifest
                .as_deref()
                .map(|path| Box::new(manifest::read_manifest(path)));
        }
        if sources.contains(Sources::MARKERS) {
            seen.markers = job
                .markers
                .iter()
                .map(|marker| marker::read_marker(&marker.path))
                .collect();
        }
    }
}

/// The reading of `job`'s lock, when it declares one: a function of the path and `/proc`
/// alone, so it can be read on any thread.
pub fn read_job_lock(job: &JobSpec) -> Option<Reading<LockHolder>> {
    job.lock.as_deref().map(lock::read_lock)
}

/// Formats an I/O error for a fault, naming what was being read.
pub(crate) fn fault<T>(what: &std::path::Path, error: impl std::fmt::Display) -> Reading<T> {
    Reading::Fault(crate::core::text::inert(&format!(
        "cannot read '{}': {error}",
        what.display()
    )))
}

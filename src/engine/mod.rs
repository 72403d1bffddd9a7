//! The engine: the one place that sequences probe -> core for every command.
//!
//! `mihari check`, the demo and (later) the dashboard and the watcher all ask the engine for
//! a [`Snapshot`]: the evidence of every job, its assessment, and the action list. The engine
//! owns the probes' memory (incremental counts, the last result of each check) and the clock
//! reading of each pass; `core` stays pure because the engine hands it `now`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::thread;

use chrono::{DateTime, Utc};

use crate::config::{Config, JobSpec};
use crate::core::{ActionList, CheckOutcome, Evidence, assess, order};
use crate::probe::{Prober, checks};

/// One pass over every job: what was seen and what it means.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub generated_at: DateTime<Utc>,
    /// Evidence per job, in jobs-file order.
    pub evidence: Vec<(String, Evidence)>,
    pub list: ActionList,
    /// Things the operator should know that are not about one job ("no watcher yet").
    pub notices: Vec<String>,
}

impl Snapshot {
    /// The evidence gathered for job `id`.
    pub fn evidence_of(&self, id: &str) -> Option<&Evidence> {
        self.evidence
            .iter()
            .find(|(job, _)| job == id)
            .map(|(_, e)| e)
    }
}

/// Holds the jobs file and the probes' memory between passes.
#[derive(Debug)]
pub struct Engine {
    config: Config,
    prober: Prober,
    /// The latest outcome of each check, by (job id, check name).
    checks: HashMap<(String, String), CheckOutcome>,
}

impl Engine {
    pub fn new(config: Config) -> Self {
        Engine {
            config,
            prober: Prober::new(),
            checks: HashMap::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs checks in parallel and remembers their outcomes: every check when `now` is `None`,
    /// otherwise only those whose `every_sec` has passed since their last run.
    pub fn run_checks(&mut self, now: Option<DateTime<Utc>>) {
        let due: Vec<(&JobSpec, usize)> = self
            .config
            .jobs
            .iter()
            .flat_map(|job| (0..job.checks.len()).map(move |i| (job, i)))
            .filter(|(job, i)| {
                let check = &job.checks[*i];
                match (now, self.checks.get(&(job.id.clone(), check.name.clone()))) {
                    (Some(now), Some(last)) => {
                        (now - last.at).num_seconds() >= check.every_sec as i64
                    }
                    _ => true,
                }
            })
            .collect();
        let default_cwd = self.config_folder();
        let outcomes: Vec<((String, String), CheckOutcome)> = thread::scope(|scope| {
            let running: Vec<_> = due
                .iter()
                .map(|(job, i)| {
                    let check = &job.checks[*i];
                    let cwd = check_folder(job, &default_cwd);
                    let key = (job.id.clone(), check.name.clone());
                    scope.spawn(move || (key, checks::run_check(check, &cwd)))
                })
                .collect();
            running
                .into_iter()
                .filter_map(|handle| handle.join().ok())
                .collect()
        });
        self.checks.extend(outcomes);
    }

    /// Gathers every job's evidence, judges it at `now`, and orders the action list.
    pub fn snapshot(&mut self, now: DateTime<Utc>) -> Snapshot {
        let mut evidence = Vec::with_capacity(self.config.jobs.len());
        let mut assessments = Vec::with_capacity(self.config.jobs.len());
        for job in &self.config.jobs {
            let mut seen = self.prober.gather(job);
            seen.checks = job
                .checks
                .iter()
                .filter_map(|c| self.checks.get(&(job.id.clone(), c.name.clone())).cloned())
                .collect();
            assessments.push(assess(job, &seen, now));
            evidence.push((job.id.clone(), seen));
        }
        Snapshot {
            generated_at: now,
            evidence,
            list: order(assessments),
            notices: vec![format!(
                "no watcher yet: no machine watcher has run for state_dir '{}', so nothing \
                 watches these jobs while no one looks",
                self.config.settings.state_dir.display()
            )],
        }
    }

    fn config_folder(&self) -> PathBuf {
        self.config
            .source
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))
    }
}

/// Checks run in the job's `restart.cwd`, else in the jobs file's folder.
fn check_folder(job: &JobSpec, default: &Path) -> PathBuf {
    job.restart
        .as_ref()
        .and_then(|r| r.cwd.clone())
        .unwrap_or_else(|| default.to_path_buf())
}

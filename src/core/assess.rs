//! assess(): one job's evidence -> its state, reasons and bucket. (being written)
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::evidence::{CheckOutcome, Evidence, Liveness};
use crate::config::JobSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State { DeadLockStale, Unknown, Stalled, Running, ShouldBeRunning, Complete, NotRunning }

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Bucket { Restart, Red, Stale, Dispatch }

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub id: String,
    pub state: State,
    pub bucket: Option<Bucket>,
    pub liveness: Option<Liveness>,
    pub pid: Option<u32>,
    pub reasons: Vec<String>,
    pub checks: Vec<CheckOutcome>,
}

pub fn assess(job: &JobSpec, evidence: &Evidence, now: DateTime<Utc>) -> Assessment {
    let _ = (evidence, now);
    Assessment { id: job.id.clone(), state: State::NotRunning, bucket: None, liveness: None, pid: None, reasons: vec![], checks: vec![] }
}

//! The action list: RESTART -> RED -> STALE -> DISPATCH, then everything else.
//!
//! The order is fixed so the operator never has to think about what to look at first, and
//! while anything is RED nothing new is dispatched: DISPATCH rows stay listed, marked held
//! with the reason. Within a section jobs keep the order of the jobs file. Pure: no clock,
//! no I/O.

use super::assess::{Assessment, Bucket};

/// Every assessment of one pass, sorted into the action list.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ActionList {
    /// Rows needing a human, in bucket order; within a bucket, in jobs-file order.
    pub actions: Vec<Assessment>,
    /// RUNNING, COMPLETE and NOT_RUNNING jobs with nothing to do, in jobs-file order.
    pub rest: Vec<Assessment>,
    /// Why dispatch is held (the RED jobs), or `None` when nothing is RED.
    pub dispatch_held: Option<String>,
}

impl ActionList {
    /// Every row: the action list, then the rest.
    pub fn rows(&self) -> impl Iterator<Item = &Assessment> {
        self.actions.iter().chain(self.rest.iter())
    }

    /// The rows of one bucket.
    pub fn bucket(&self, bucket: Bucket) -> impl Iterator<Item = &Assessment> {
        self.actions
            .iter()
            .filter(move |a| a.bucket == Some(bucket))
    }

    /// How many rows each bucket holds, in [`Bucket::ORDER`].
    pub fn counts(&self) -> [(Bucket, usize); 4] {
        Bucket::ORDER.map(|bucket| (bucket, self.bucket(bucket).count()))
    }

    /// The most severe bucket present, if any.
    pub fn worst(&self) -> Option<Bucket> {
        self.actions.iter().filter_map(|a| a.bucket).min()
    }
}

/// Sorts assessments (given in jobs-file order) into the action list and marks DISPATCH
/// rows held while any job is RED.
pub fn order(assessments: Vec<Assessment>) -> ActionList {
    let red: Vec<&str> = assessments
        .iter()
        .filter(|a| a.bucket == Some(Bucket::Red))
        .map(|a| a.id.as_str())
        .collect();
    let dispatch_held = (!red.is_empty()).then(|| format!("RED: {}", red.join(", ")));

    let (mut actions, rest): (Vec<Assessment>, Vec<Assessment>) =
        assessments.into_iter().partition(|a| a.bucket.is_some());
    // A stable sort keeps jobs-file order within each bucket.
    actions.sort_by_key(|a| a.bucket);
    if let Some(why) = &dispatch_held {
        for row in actions
            .iter_mut()
            .filter(|a| a.bucket == Some(Bucket::Dispatch))
        {
            row.held = Some(format!("held: nothing new is dispatched while {why}"));
        }
    }
    ActionList {
        actions,
        rest,
        dispatch_held,
    }
}

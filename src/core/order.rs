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
    /// RUNNING, COMPLETE and NOT_RUNNING jobs with nothing to do, in jobs-file order, then
    /// the PAUSED ones.
    pub rest: Vec<Assessment>,
    /// Why dispatch is held (the RED jobs and rules), or `None` when nothing is RED.
    pub dispatch_held: Option<String>,
    /// Rules found broken that belong to no job ("no machine is watching"): RED.
    pub rules: Vec<String>,
    /// How many approvals the rows wait for, counted once a list: a screen that asks at
    /// every frame would read every row of a farm to learn that none does.
    approvals: usize,
}

impl ActionList {
    /// Every row: the action list, then the rest.
    pub fn rows(&self) -> impl Iterator<Item = &Assessment> {
        self.actions.iter().chain(self.rest.iter())
    }

    /// How many approvals the rows wait for, all told.
    pub fn pending_approvals(&self) -> usize {
        self.approvals
    }

    /// The rows of one bucket.
    pub fn bucket(&self, bucket: Bucket) -> impl Iterator<Item = &Assessment> {
        self.actions
            .iter()
            .filter(move |a| a.bucket == Some(bucket))
    }

    /// How many rows each bucket holds, in [`Bucket::ORDER`]; a broken rule counts as RED.
    pub fn counts(&self) -> [(Bucket, usize); 4] {
        Bucket::ORDER.map(|bucket| {
            let rules = if bucket == Bucket::Red {
                self.rules.len()
            } else {
                0
            };
            (bucket, self.bucket(bucket).count() + rules)
        })
    }

    /// The most severe bucket present, if any.
    pub fn worst(&self) -> Option<Bucket> {
        let rules = (!self.rules.is_empty()).then_some(Bucket::Red);
        self.actions
            .iter()
            .filter_map(|a| a.bucket)
            .chain(rules)
            .min()
    }
}

/// Sorts assessments (given in jobs-file order) into the action list and marks DISPATCH
/// rows held while any job is RED.
pub fn order(assessments: Vec<Assessment>) -> ActionList {
    order_with_rules(assessments, Vec::new())
}

/// [`order`], with rules found broken that belong to no job: they are RED, and hold dispatch.
pub fn order_with_rules(assessments: Vec<Assessment>, rules: Vec<String>) -> ActionList {
    let mut red: Vec<&str> = assessments
        .iter()
        .filter(|a| a.bucket == Some(Bucket::Red))
        .map(|a| a.id.as_str())
        .collect();
    red.extend(rules.iter().map(String::as_str));
    let dispatch_held = (!red.is_empty()).then(|| format!("RED: {}", red.join(", ")));

    // The rows needing a human are taken out and the rest stay where they are: splitting a
    // farm's rows into two new lists would hold them twice for a moment (and keep the slack
    // of two grown lists, 6 MB at 10,000 jobs).
    let mut rest = assessments;
    let mut actions: Vec<Assessment> = rest.extract_if(.., |a| a.bucket.is_some()).collect();
    // Paused jobs come last of all, together, so a pause is seen and never lost among the
    // running ones (a stable sort: jobs-file order among them; only when there is one, for
    // the sort's scratch space is half the rows).
    let paused = |a: &Assessment| a.state == super::assess::State::Paused;
    if rest.iter().any(paused) {
        rest.sort_by_key(paused);
    }
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
    let approvals = actions
        .iter()
        .chain(&rest)
        .map(|a| a.pending_approvals.len())
        .sum();
    ActionList {
        actions,
        rest,
        dispatch_held,
        rules,
        approvals,
    }
}

//! The action list. (being written)
use super::assess::Assessment;
#[derive(Debug, Clone, PartialEq)]
pub struct ActionList { pub rows: Vec<Assessment> }
pub fn order(assessments: Vec<Assessment>) -> ActionList { ActionList { rows: assessments } }

//! SQLite progress tables, read-only. Stub: the real probe replaces it.

use crate::config::ProgressTable;
use crate::core::{Reading, TableReading};

/// `max(time_column)` and `count(*)` of the table.
pub fn read_progress_table(spec: &ProgressTable) -> Reading<TableReading> {
    let _ = spec;
    Reading::Empty
}

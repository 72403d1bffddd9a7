//! The renderers: one snapshot of every job, written as the text a reader other than the
//! dashboard expects — Prometheus exposition (for `check --prometheus` and the watcher's
//! textfile) and the Monitoring Plugins format (`check --nagios`).
//!
//! Renderers only turn a [`Snapshot`](crate::engine::Snapshot) into bytes on a `Write`: they
//! judge nothing, read nothing from the world and never import the command line, so the
//! command line, the watcher, the demo and the fleet all print the same words.

pub mod nagios;
pub mod prometheus;

use crate::core::Bucket;
use crate::engine::Snapshot;

pub const EXIT_OK: u8 = 0;
pub const EXIT_WARNING: u8 = 1;
pub const EXIT_CRITICAL: u8 = 2;
pub const EXIT_UNKNOWN: u8 = 3;

/// The Nagios status of a snapshot: a state store that cannot be used is UNKNOWN (what it
/// holds — approvals, history, the watcher's record — cannot be seen); otherwise the worst
/// bucket present decides, and a pending approval is at least a warning.
pub fn status_code(snapshot: &Snapshot) -> u8 {
    if snapshot.store_fault.is_some() {
        return EXIT_UNKNOWN;
    }
    let approvals = snapshot
        .list
        .rows()
        .any(|row| !row.pending_approvals.is_empty());
    match snapshot.list.worst() {
        Some(Bucket::Restart | Bucket::Red) => EXIT_CRITICAL,
        Some(Bucket::Stale | Bucket::Dispatch) => EXIT_WARNING,
        None if approvals => EXIT_WARNING,
        None => EXIT_OK,
    }
}

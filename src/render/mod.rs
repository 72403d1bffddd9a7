//! The renderers: one snapshot of every job, written as the text a reader other than the
//! dashboard expects — the table, `check --json`'s object, Prometheus exposition (for
//! `check --prometheus` and the watcher's textfile) and the Monitoring Plugins format
//! (`check --nagios`) — and the exit code they share.
//!
//! Renderers only turn a [`Snapshot`](crate::engine::Snapshot) into bytes on a `Write`: they
//! judge nothing, read nothing from the world and never import the command line, so the
//! command line, the watcher, the demo and the fleet all print the same words.

pub mod json;
pub mod nagios;
pub mod prometheus;
pub mod table;

pub use json::render_json;
pub use table::{render_table, render_table_in};

use std::io::{self, Write};

use chrono::Utc;

use crate::core::Bucket;
use crate::engine::{Engine, Snapshot};

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
    let approvals = snapshot.list.pending_approvals() > 0;
    match snapshot.list.worst() {
        Some(Bucket::Restart | Bucket::Red) => EXIT_CRITICAL,
        Some(Bucket::Stale | Bucket::Dispatch) => EXIT_WARNING,
        None if approvals => EXIT_WARNING,
        None => EXIT_OK,
    }
}

/// How `check` prints its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckFormat {
    Table,
    Json,
    Prometheus,
    Nagios,
}

/// One assessment of every job (checks run first), written in `format`.
pub fn assess_and_render(
    config: crate::config::Config,
    format: CheckFormat,
    out: &mut impl Write,
) -> (Snapshot, io::Result<()>) {
    let mut engine = Engine::new(config);
    engine.run_checks(None);
    let snapshot = engine.snapshot(Utc::now());
    let written = match format {
        CheckFormat::Table => render_table(&snapshot, out),
        CheckFormat::Json => render_json(&snapshot, &engine.config().jobs, out),
        CheckFormat::Prometheus => prometheus::render(
            &snapshot,
            &engine.config().jobs,
            prometheus::Writer::Check,
            out,
        ),
        CheckFormat::Nagios => nagios::render(&snapshot, out),
    };
    (snapshot, written)
}

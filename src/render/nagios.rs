//! The Monitoring Plugins output of one snapshot (SPEC §11), for Nagios, Icinga and NRPE:
//! a short first line with performance data, then one line per job that needs a human.
//!
//! The exit code is check's own (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), which is the
//! plugins' convention. A `|` starts performance data in that format, so none reaches the
//! text from a job's name or reason: each one is shown as `/`.

use std::io::{self, Write};

use crate::core::text::inert;
use crate::core::{Assessment, Bucket, State};
use crate::engine::Snapshot;

use super::{EXIT_CRITICAL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARNING, status_code};

/// Writes the plugin output of `snapshot`.
pub fn render(snapshot: &Snapshot, out: &mut impl Write) -> io::Result<()> {
    let list = &snapshot.list;
    let counts = list.counts();
    let approvals = list.pending_approvals();
    let status = match status_code(snapshot) {
        EXIT_OK => "OK",
        EXIT_WARNING => "WARNING",
        EXIT_CRITICAL => "CRITICAL",
        _ => "UNKNOWN",
    };
    let mut said: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(bucket, n)| format!("{n} {}", bucket.as_str().to_lowercase()))
        .collect();
    if approvals > 0 {
        said.push(format!(
            "{approvals} approval{} pending",
            if approvals == 1 { "" } else { "s" }
        ));
    }
    let summary = if status_code(snapshot) == EXIT_UNKNOWN {
        "the state store cannot be used".to_string()
    } else if said.is_empty() {
        let jobs = list.actions.len() + list.rest.len();
        format!(
            "{jobs} job{}, nothing to do",
            if jobs == 1 { "" } else { "s" }
        )
    } else {
        said.join(", ")
    };
    let perfdata: Vec<String> = counts
        .iter()
        .map(|(bucket, n)| format!("{}={n};;;0", bucket.as_str().to_lowercase()))
        .chain([format!("approvals={approvals};;;0")])
        .collect();
    writeln!(out, "MIHARI {status} - {summary} | {}", perfdata.join(" "))?;
    if let Some(fault) = &snapshot.store_fault {
        writeln!(out, "UNKNOWN store: {}", plain(fault))?;
    }
    for bucket in Bucket::ORDER {
        if bucket == Bucket::Red {
            for rule in &list.rules {
                writeln!(out, "RED rule: {}", plain(rule))?;
            }
        }
        for row in list.bucket(bucket) {
            writeln!(out, "{} {}", bucket.as_str(), line(row, bucket))?;
        }
    }
    for row in list.rows() {
        for approval in &row.pending_approvals {
            writeln!(
                out,
                "APPROVAL {}: step '{}' waits for a human ({}) - mihari approval list",
                plain(&row.id),
                plain(&approval.step),
                plain(&approval.summary)
            )?;
        }
    }
    Ok(())
}

/// One job's line: its name, state and the reason that put it in its bucket — for a RED
/// row the broken rule or the failing check, for a STALE row that is not stalled the marker
/// to look at (its path and age), not the state's own words — or why it is held.
fn line(row: &Assessment, bucket: Bucket) -> String {
    let mut reasons = row.held.iter().chain(row.reasons.iter());
    let red = |reason: &&String| {
        reason.starts_with("rule broken: ")
            || (reason.starts_with("check '") && reason.contains("' failed: "))
    };
    // A marker's reason starts with its name (core::marker's words).
    let marker = |reason: &&String| reason.starts_with("marker '");
    let markers = row.reasons.iter().filter(marker).count();
    let why = match bucket {
        Bucket::Red => row.reasons.iter().find(red).or_else(|| reasons.next()),
        // A stall (or an unknown state) is the job's own reason to be STALE.
        Bucket::Stale if !matches!(row.state, State::Stalled | State::Unknown) => {
            row.reasons.iter().find(marker).or_else(|| reasons.next())
        }
        _ => reasons.next(),
    };
    let more = match why {
        Some(reason) if marker(&reason) && markers > 1 => {
            format!(" (and {} more markers to look at)", markers - 1)
        }
        _ => String::new(),
    };
    let why = why
        .map(|reason| format!(" - {}{more}", plain(reason)))
        .unwrap_or_default();
    format!("{}: {}{why}", plain(&row.id), row.state.as_str())
}

/// Text from jobs made inert and kept on one line, with no `|` to start performance data.
fn plain(text: &str) -> String {
    inert(text).replace('|', "/").replace(['\n', '\r'], " ")
}

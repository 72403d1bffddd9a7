//! Prometheus text exposition of one snapshot (SPEC §11): what `check --prometheus` prints
//! and what the watcher writes to `settings.prometheus_textfile` for node_exporter.
//!
//! The names follow Prometheus' own rules so that `promtool check metrics` finds nothing to
//! say: the job's label is `job_id` (Prometheus owns `job` and `instance`), units are in the
//! names (`_seconds`, `_items`), only counters end in `_total`, and no PID is a label. A
//! state, bucket or liveness is an enum: every value is written, 1 for the current one and 0
//! for the rest, so an alert never reads a series that went stale when the value changed.

use std::fmt::Write as _;
use std::io::{self, Write};

use chrono::{DateTime, Utc};

use crate::config::JobSpec;
use crate::core::assess::ProgressSource;
use crate::core::{Bucket, Liveness, State};
use crate::engine::{Snapshot, WatcherStatus};

/// Who writes the exposition, which decides what is known of the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// `mihari check --prometheus`: the watcher is judged from its lock and its record.
    Check,
    /// The watcher itself, at the end of its loop's turn at `at`: a pass, or a turn with
    /// nothing new to judge, whose judgment stands as the last pass left it.
    Watcher { at: DateTime<Utc> },
    /// The watcher, on its way out: what it writes last says that nothing watches now.
    WatcherStopping,
}

/// Writes the exposition of `snapshot`; `jobs` are the jobs it was taken of (for what the
/// jobs file says of each, such as `auto_restart`).
pub fn render(
    snapshot: &Snapshot,
    jobs: &[JobSpec],
    writer: Writer,
    out: &mut impl Write,
) -> io::Result<()> {
    out.write_all(exposition(snapshot, jobs, writer).as_bytes())
}

/// The exposition as one string: the watcher writes it to its temp file in one write.
pub fn exposition(snapshot: &Snapshot, jobs: &[JobSpec], writer: Writer) -> String {
    let rows: Vec<_> = snapshot.list.rows().collect();
    let mut text = String::with_capacity(512 + rows.len() * 1024);
    let t = &mut text;

    family(
        t,
        "mihari_build_info",
        "gauge",
        "The mihari that wrote these metrics; always 1.",
    );
    let _ = writeln!(
        t,
        "mihari_build_info{{version=\"{}\"}} 1",
        label(env!("CARGO_PKG_VERSION"))
    );

    family(
        t,
        "mihari_job_state",
        "gauge",
        "1 for the job's current state, 0 for every other state.",
    );
    for row in &rows {
        let id = label(&row.id);
        for state in State::ALL {
            let _ = writeln!(
                t,
                "mihari_job_state{{job_id=\"{id}\",state=\"{}\"}} {}",
                state.as_str(),
                u8::from(row.state == state)
            );
        }
    }

    family(
        t,
        "mihari_job_attention",
        "gauge",
        "1 for the action-list bucket the job is in (RESTART, RED, STALE, DISPATCH), 0 for the \
         others; all 0 when it needs nothing.",
    );
    for row in &rows {
        let id = label(&row.id);
        for bucket in Bucket::ORDER {
            let _ = writeln!(
                t,
                "mihari_job_attention{{job_id=\"{id}\",bucket=\"{}\"}} {}",
                bucket.as_str(),
                u8::from(row.bucket == Some(bucket))
            );
        }
    }

    family(
        t,
        "mihari_job_liveness",
        "gauge",
        "1 for the liveness of the job's holder (alive, dead, unknown: unknown is never dead); \
         no series when no holder is declared or found.",
    );
    for row in &rows {
        let Some(liveness) = row.liveness else {
            continue;
        };
        let id = label(&row.id);
        for value in [Liveness::Alive, Liveness::Dead, Liveness::Unknown] {
            let _ = writeln!(
                t,
                "mihari_job_liveness{{job_id=\"{id}\",liveness=\"{}\"}} {}",
                value.as_str(),
                u8::from(liveness == value)
            );
        }
    }

    // Jobs Slurm runs: Slurm's own state and the job's id (a value, never a label: a new id
    // with each submission would make a new series each time).
    let slurm: Vec<_> = rows
        .iter()
        .filter_map(|row| row.slurm.as_ref().map(|held| (row, held)))
        .collect();
    if !slurm.is_empty() {
        family(
            t,
            "mihari_job_slurm_state",
            "gauge",
            "1 for the state Slurm gives the Slurm job holding the job (PENDING, RUNNING, \
             FAILED...), for jobs declared with slurm.",
        );
        for (row, held) in &slurm {
            let _ = writeln!(
                t,
                "mihari_job_slurm_state{{job_id=\"{}\",state=\"{}\"}} 1",
                label(&row.id),
                label(&held.state)
            );
        }
        family(
            t,
            "mihari_job_slurm_job_id",
            "gauge",
            "The id of the Slurm job holding the job, for jobs declared with slurm.",
        );
        for (row, held) in &slurm {
            let _ = writeln!(
                t,
                "mihari_job_slurm_job_id{{job_id=\"{}\"}} {}",
                label(&row.id),
                held.id
            );
        }
    }

    family(
        t,
        "mihari_job_activity_state",
        "gauge",
        "1 for what the live holder's process tree is doing as the kernel says (progressing, \
         busy, spinning, blocked, waiting, stopped, unreadable), 0 for the others; no series \
         while it is not looked at (no live holder, or its other progress is fresh).",
    );
    for row in &rows {
        let Some(activity) = row.activity.as_deref() else {
            continue;
        };
        let id = label(&row.id);
        for state in crate::core::activity::ActivityState::ALL {
            let _ = writeln!(
                t,
                "mihari_job_activity_state{{job_id=\"{id}\",state=\"{}\"}} {}",
                state.as_str(),
                u8::from(activity.state == state)
            );
        }
    }

    family(
        t,
        "mihari_job_last_progress_timestamp_seconds",
        "gauge",
        "When the job last made progress (Unix time), by its freshest source; no series \
         before any source has a reading.",
    );
    for row in &rows {
        let (Some(age), Some(source)) = (row.progress_age_sec, row.progress_source) else {
            continue;
        };
        if source == ProgressSource::HolderStart {
            continue;
        }
        let at = unix_seconds(snapshot.generated_at) - age;
        let _ = writeln!(
            t,
            "mihari_job_last_progress_timestamp_seconds{{job_id=\"{}\"}} {}",
            label(&row.id),
            number(at)
        );
    }

    family(
        t,
        "mihari_job_next_due_timestamp_seconds",
        "gauge",
        "For a job with a schedule: when it is overdue unless a run ends with exit 0 first (its \
         due time plus grace, Unix time); in the past while it is overdue. No series without a \
         schedule.",
    );
    for row in &rows {
        if let Some(due) = row.next_due {
            let _ = writeln!(
                t,
                "mihari_job_next_due_timestamp_seconds{{job_id=\"{}\"}} {}",
                label(&row.id),
                number(unix_seconds(due))
            );
        }
    }

    family(
        t,
        "mihari_job_done_items",
        "gauge",
        "Items done, from the job's countable sources.",
    );
    for row in &rows {
        if let Some(done) = row.done {
            let _ = writeln!(
                t,
                "mihari_job_done_items{{job_id=\"{}\"}} {done}",
                label(&row.id)
            );
        }
    }

    family(
        t,
        "mihari_job_expected_items",
        "gauge",
        "Items the job is expected to do in all.",
    );
    for row in &rows {
        if let Some(total) = row.expected_total {
            let _ = writeln!(
                t,
                "mihari_job_expected_items{{job_id=\"{}\"}} {total}",
                label(&row.id)
            );
        }
    }

    family(
        t,
        "mihari_job_eta_seconds",
        "gauge",
        "Seconds the job still needs at its current rate; no series when unknown.",
    );
    for row in &rows {
        if let Some(eta) = row.eta_sec {
            let _ = writeln!(
                t,
                "mihari_job_eta_seconds{{job_id=\"{}\"}} {}",
                label(&row.id),
                number((eta * 1000.0).round() / 1000.0)
            );
        }
    }

    family(
        t,
        "mihari_job_restarts_total",
        "counter",
        "Restarts (spawns) of the job recorded in its host's event log, by anyone.",
    );
    for row in &rows {
        let restarts = snapshot
            .evidence_of(&row.id)
            .map_or(0, |e| e.history.restarts_total);
        let _ = writeln!(
            t,
            "mihari_job_restarts_total{{job_id=\"{}\"}} {restarts}",
            label(&row.id)
        );
    }

    family(
        t,
        "mihari_job_approvals_pending",
        "gauge",
        "Approvals the job waits for: an irreversible step a human must allow.",
    );
    for row in &rows {
        let _ = writeln!(
            t,
            "mihari_job_approvals_pending{{job_id=\"{}\"}} {}",
            label(&row.id),
            row.pending_approvals.len()
        );
    }

    family(
        t,
        "mihari_job_auto_restart",
        "gauge",
        "1 when the jobs file lets the watcher restart the job by itself, else 0: a RESTART \
         row with 0 waits for a human.",
    );
    for row in &rows {
        let allowed = jobs.iter().any(|job| job.id == row.id && job.auto_restart);
        let _ = writeln!(
            t,
            "mihari_job_auto_restart{{job_id=\"{}\"}} {}",
            label(&row.id),
            u8::from(allowed)
        );
    }

    family(
        t,
        "mihari_attention_jobs",
        "gauge",
        "Rows in each action-list bucket (the RED count includes the broken rules that \
         belong to no job).",
    );
    for (bucket, n) in snapshot.list.counts() {
        let _ = writeln!(
            t,
            "mihari_attention_jobs{{bucket=\"{}\"}} {n}",
            bucket.as_str()
        );
    }

    family(
        t,
        "mihari_rules_broken",
        "gauge",
        "Broken rules that belong to no one job (\"no machine is watching\", a refused jobs \
         file): each one is RED.",
    );
    let _ = writeln!(t, "mihari_rules_broken {}", snapshot.list.rules.len());

    family(
        t,
        "mihari_dispatch_held",
        "gauge",
        "1 while anything is RED: new work is held.",
    );
    let _ = writeln!(
        t,
        "mihari_dispatch_held {}",
        u8::from(snapshot.list.dispatch_held.is_some())
    );

    let (up, last_pass) = match (writer, &snapshot.watcher) {
        (Writer::Watcher { at }, _) => (true, Some(at)),
        (Writer::WatcherStopping, _) => (false, None),
        (Writer::Check, WatcherStatus::Alive { last_pass, .. }) => (true, Some(*last_pass)),
        (Writer::Check, WatcherStatus::Stuck { last_pass, .. }) => (false, Some(*last_pass)),
        (Writer::Check, WatcherStatus::Passes { last, .. }) => {
            (!snapshot.watcher.is_missing(), Some(*last))
        }
        (Writer::Check, _) => (false, None),
    };
    family(
        t,
        "mihari_watcher_up",
        "gauge",
        "1 while a machine watcher watches this host's jobs, else 0.",
    );
    let _ = writeln!(t, "mihari_watcher_up {}", u8::from(up));
    if let Some(at) = last_pass {
        family(
            t,
            "mihari_last_pass_timestamp_seconds",
            "gauge",
            "When the watcher last finished a pass (Unix time).",
        );
        let _ = writeln!(
            t,
            "mihari_last_pass_timestamp_seconds {}",
            number(unix_seconds(at))
        );
    }

    family(
        t,
        "mihari_store_readable",
        "gauge",
        "0 while the state store is damaged, refused or unreadable (check exits 3), else 1.",
    );
    let _ = writeln!(
        t,
        "mihari_store_readable {}",
        u8::from(snapshot.store_fault.is_none())
    );
    family(
        t,
        "mihari_store_writes_failing",
        "gauge",
        "1 while the watcher's writes to the state store fail (a RED rule), else 0.",
    );
    let _ = writeln!(
        t,
        "mihari_store_writes_failing {}",
        u8::from(snapshot.store_writes_failing.is_some())
    );
    text
}

fn family(t: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(t, "# HELP {name} {}", help_text(help));
    let _ = writeln!(t, "# TYPE {name} {kind}");
}

fn unix_seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

/// A sample value: whole numbers without a fraction, others to the millisecond.
fn number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

/// Escapes a HELP text (backslash and newline), as the exposition format asks.
fn help_text(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Escapes a label value (backslash, double quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_as_the_exposition_format_asks() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn whole_numbers_print_without_a_fraction() {
        assert_eq!(number(1_700_000_000.0), "1700000000");
        assert_eq!(number(1.5), "1.500");
    }
}

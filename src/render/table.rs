//! The readable table of one snapshot: what `mihari check` prints by default and what a
//! `mihari watch --once` pass prints — action-list order, each row followed by its reasons,
//! times in the machine's zone named once in the first line.

use std::io::{self, Write};

use crate::core::assess::fmt_secs;
use crate::core::text::inert;
use crate::core::{Assessment, Bucket};
use crate::engine::Snapshot;
use crate::probe::zone::Zone;

/// A readable table in action-list order, each row followed by its reasons; times in the
/// machine's zone, named once in the first line.
pub fn render_table(snapshot: &Snapshot, out: &mut impl Write) -> io::Result<()> {
    render_table_in(snapshot, Zone::machine(), out)
}

/// [`render_table`] with times in `zone`.
pub fn render_table_in(snapshot: &Snapshot, zone: Zone, out: &mut impl Write) -> io::Result<()> {
    let list = &snapshot.list;
    let total = list.actions.len() + list.rest.len();
    let counts: Vec<String> = list
        .counts()
        .iter()
        .map(|(bucket, n)| format!("{} {n}", bucket.as_str()))
        .collect();
    writeln!(
        out,
        "mihari check · {} · {} · {total} job{} · {} · {}",
        zone.format(snapshot.generated_at, "%Y-%m-%d %H:%M:%S"),
        zone.header(snapshot.generated_at),
        if total == 1 { "" } else { "s" },
        counts.join(" · "),
        snapshot.watcher.words_in(zone)
    )?;
    if let Some(fault) = &snapshot.store_fault {
        writeln!(
            out,
            "UNKNOWN: the state store cannot be used, so approvals, history and the \
             watcher's record are not known: {}",
            inert(fault)
        )?;
    }
    if let Some(why) = &list.dispatch_held {
        writeln!(out, "dispatch held: {}", inert(why))?;
    }
    let approvals: usize = list.rows().map(|row| row.pending_approvals.len()).sum();
    if approvals > 0 {
        writeln!(out, "approvals pending: {approvals} (mihari approval list)")?;
    }
    for notice in &snapshot.notices {
        writeln!(out, "notice: {}", zone.rewrite_utc_stamps(&inert(notice)))?;
    }
    if total == 0 {
        writeln!(
            out,
            "\nno jobs declared: add some under 'jobs:' (see jobs.example.yaml)"
        )?;
        return Ok(());
    }
    let width = list
        .rows()
        .map(|a| a.id.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 32);
    for (bucket, count) in list.counts() {
        if count == 0 {
            continue;
        }
        writeln!(out, "\n{} ({count})", bucket.as_str())?;
        if bucket == Bucket::Red {
            for rule in &list.rules {
                writeln!(out, "  ✖ {}", zone.rewrite_utc_stamps(&inert(rule)))?;
            }
        }
        for row in list.bucket(bucket) {
            write_row(row, width, zone, out)?;
        }
    }
    let (paused, quiet): (Vec<&Assessment>, Vec<&Assessment>) = list
        .rest
        .iter()
        .partition(|row| row.state == crate::core::State::Paused);
    if !quiet.is_empty() {
        writeln!(out, "\nNOTHING TO DO ({})", quiet.len())?;
        for row in quiet {
            write_row(row, width, zone, out)?;
        }
    }
    if !paused.is_empty() {
        writeln!(out, "\nPAUSED ({})", paused.len())?;
        for row in paused {
            write_row(row, width, zone, out)?;
        }
    }
    Ok(())
}

fn write_row(row: &Assessment, width: usize, zone: Zone, out: &mut impl Write) -> io::Result<()> {
    let liveness = match (row.liveness, row.pid) {
        (Some(l), Some(pid)) => format!("{} pid {pid}", l.as_str()),
        (Some(l), None) => l.as_str().to_string(),
        (None, _) => "no lock".to_string(),
    };
    // A Slurm job's holder is Slurm's: its id and state in Slurm's words.
    let liveness = match &row.slurm {
        Some(held) => format!("slurm {} {}", held.shown_id(), held.state),
        None => liveness,
    };
    let progress = match (row.done, row.expected_total) {
        (Some(done), Some(total)) if total > 0 => {
            format!("{done}/{total} {}%", (done * 100 / total).min(100))
        }
        (_, None) if row.percent.is_some() => format!("{:.0}%", row.percent.unwrap_or(0.0)),
        (Some(done), _) => format!("{done} done"),
        (None, Some(total)) => format!("?/{total}"),
        (None, None) => "-".to_string(),
    };
    let age = match (row.progress_age_sec, row.progress_source) {
        (Some(age), Some(source)) => format!("age {} ({})", fmt_secs(age), source.as_str()),
        _ => "age -".to_string(),
    };
    writeln!(
        out,
        "  {:<width$}  {:<17}  {:<16}  {:<14}  {age}",
        inert(&row.id),
        row.state.as_str(),
        liveness,
        progress,
    )?;
    if let Some(held) = &row.held {
        writeln!(out, "      {}", zone.rewrite_utc_stamps(&inert(held)))?;
    }
    for reason in &row.reasons {
        writeln!(out, "      - {}", zone.rewrite_utc_stamps(&inert(reason)))?;
    }
    Ok(())
}

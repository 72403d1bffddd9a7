//! `mihari digest`: the daily digest on the command line — everything that did not interrupt
//! anyone, grouped by job, with the rise in suppressions called out.
//!
//! By default it shows the newest digest nobody has read yet (or, before the first cut, the
//! queue so far and when the cut comes); `--all` shows every digest and the queue; `--json`
//! writes one object per digest per line, the queue last with `"id": null`. It only reads:
//! printing a digest never marks it delivered — the dashboard's mark-read does — so running
//! it from cron or a shell cannot make the operator miss one. Every text it prints has passed
//! through `inert`. Grouping and callouts are `core::digest::report`'s; this file only
//! chooses which digests to show and lays them out.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use chrono::{DateTime, Local, Utc};

use crate::probe::zone::Zone;
use clap::Args;
use serde::Serialize;

use super::check::EXIT_UNKNOWN;
use crate::core::digest::{DigestReport, report, rfc3339};
use crate::core::text::inert;
use crate::store::digest::{Digest, DigestItem, next_cut};
use crate::store::{Actor, Store};

#[derive(Debug, Args)]
pub struct DigestArgs {
    /// One JSON object per digest.
    #[arg(long)]
    pub json: bool,
    /// Every digest, delivered ones included, and the queue not cut yet.
    #[arg(long)]
    pub all: bool,
    /// The state folder whose store to read (settings.state_dir), instead of the one the
    /// jobs file names: for a jobs file too broken to say.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,
}

pub fn run(config: Option<&Path>, args: DigestArgs, out: &mut impl Write) -> ExitCode {
    // A refused jobs file does not stop it: the store its settings name is read, as `events`
    // does.
    let store_at = match super::jobside::store_for_reading(config, args.state_dir.as_deref()) {
        Ok(store_at) => store_at,
        Err(code) => return code,
    };
    let store = match Store::open(&store_at.state_dir, Actor::Cli) {
        Ok(store) => store,
        Err(error) => return refuse(&error.to_string()),
    };
    let read = store
        .digests(true)
        .and_then(|digests| Ok((digests, store.pending_digest()?)));
    let (digests, pending) = match read {
        Ok(read) => read,
        Err(error) => return refuse(&format!("cannot read the digest: {error}")),
    };
    let view = View {
        digests: &digests,
        pending: &pending,
        next_cut: next_cut(Utc::now(), store_at.digest_at),
        all: args.all,
    };
    let written = if args.json {
        view.write_json(out)
    } else {
        view.write_text(out)
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`mihari digest | head`) is not an error.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => refuse(&format!("cannot write the digest: {error}")),
    }
}

/// What one run shows: every cut digest (newest first), the queue not cut yet, and when the
/// next cut comes.
struct View<'a> {
    digests: &'a [Digest],
    pending: &'a [DigestItem],
    next_cut: DateTime<Utc>,
    all: bool,
}

/// A digest as one JSON line: its identity, then the report's fields.
#[derive(Serialize)]
struct DigestJson<'a> {
    id: Option<i64>,
    cut: Option<String>,
    delivered: Option<String>,
    /// Only on the queue: when it will be cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cut: Option<String>,
    #[serde(flatten)]
    report: &'a DigestReport,
}

impl View<'_> {
    /// The digests to show, each with its index in `digests` (the ones after it are its
    /// baseline): all of them with `--all`, else the newest undelivered one.
    fn shown(&self) -> Vec<usize> {
        if self.all {
            return (0..self.digests.len()).collect();
        }
        self.newest_undelivered().into_iter().collect()
    }

    fn newest_undelivered(&self) -> Option<usize> {
        self.digests.iter().position(|d| d.delivered.is_none())
    }

    /// The report of the digest at `index`, measured against the digests cut before it.
    fn report_of(&self, index: usize) -> DigestReport {
        let earlier = self.digests.get(index + 1..).unwrap_or_default();
        report(&self.digests[index].items, earlier)
    }

    fn pending_report(&self) -> DigestReport {
        report(self.pending, self.digests)
    }

    fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        for index in self.shown() {
            let digest = &self.digests[index];
            let report = self.report_of(index);
            let line = DigestJson {
                id: Some(digest.id),
                cut: Some(rfc3339(digest.cut)),
                delivered: digest.delivered.map(rfc3339),
                next_cut: None,
                report: &report,
            };
            writeln!(out, "{}", to_json(&line)?)?;
        }
        let report = self.pending_report();
        let line = DigestJson {
            id: None,
            cut: None,
            delivered: None,
            next_cut: Some(rfc3339(self.next_cut)),
            report: &report,
        };
        writeln!(out, "{}", to_json(&line)?)
    }

    fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        let shown = self.shown();
        if shown.is_empty() {
            self.write_nothing_to_read(out)?;
        }
        for (n, &index) in shown.iter().enumerate() {
            if n > 0 {
                writeln!(out)?;
            }
            self.write_digest(index, out)?;
        }
        if !self.all
            && let Some(newest) = self.newest_undelivered()
        {
            let older = self.digests[newest + 1..]
                .iter()
                .filter(|d| d.delivered.is_none())
                .count();
            if older > 0 {
                writeln!(
                    out,
                    "\n{older} older {} not delivered yet: mihari digest --all",
                    plural(older, "digest", "digests")
                )?;
            }
        }
        // The queue itself with --all, or when there is no digest to read; otherwise only
        // its count, so the default stays one day's reading.
        if !self.pending.is_empty() && (self.all || shown.is_empty()) {
            let title = if self.all {
                "not cut yet"
            } else {
                "the queue so far"
            };
            writeln!(out, "\n{title}:")?;
            write_lines(&self.pending_report(), out)?;
        }
        writeln!(
            out,
            "\npending: {} not cut yet; the next cut is at {}",
            items(self.pending.len()),
            self.next_cut_text()
        )
    }

    /// Before the first cut, or when every digest was delivered: say so.
    fn write_nothing_to_read(&self, out: &mut impl Write) -> io::Result<()> {
        match self.digests.first() {
            None => writeln!(
                out,
                "no digest cut yet; the next cut is at {}",
                self.next_cut_text()
            ),
            Some(newest) => writeln!(
                out,
                "no digest waiting: the newest, #{} cut {}, was delivered {} \
                 (mihari digest --all shows every digest)",
                newest.id,
                local(newest.cut),
                newest.delivered.map_or_else(|| "-".to_string(), local)
            ),
        }
    }

    fn write_digest(&self, index: usize, out: &mut impl Write) -> io::Result<()> {
        let digest = &self.digests[index];
        let delivered = match digest.delivered {
            Some(at) => format!("delivered {}", local(at)),
            None => "not delivered yet".to_string(),
        };
        // The cut in UTC too, unless the machine's zone is UTC already.
        let utc = digest.cut.format("%Y-%m-%d %H:%M UTC").to_string();
        let cut = match local(digest.cut) {
            same if same == utc => same,
            local => format!("{local} ({utc})"),
        };
        writeln!(
            out,
            "digest #{} · cut {cut} · {} · {delivered}",
            digest.id,
            items(digest.items.len()),
        )?;
        write_lines(&self.report_of(index), out)
    }

    fn next_cut_text(&self) -> String {
        let zone = Zone::machine();
        format!(
            "{} {}, {}",
            zone.format(self.next_cut, "%H:%M"),
            zone.short_name(self.next_cut),
            zone.format(self.next_cut, "%Y-%m-%d")
        )
    }
}

fn write_lines(report: &DigestReport, out: &mut impl Write) -> io::Result<()> {
    for line in report.lines(&Local) {
        writeln!(out, "{}", inert(&line))?;
    }
    Ok(())
}

fn to_json(value: &impl Serialize) -> io::Result<String> {
    serde_json::to_string(value).map_err(io::Error::other)
}

/// A time in the machine's zone, named by its abbreviation ("2025-05-04 18:00 JST").
fn local(at: DateTime<Utc>) -> String {
    let zone = Zone::machine();
    format!(
        "{} {}",
        zone.format(at, "%Y-%m-%d %H:%M"),
        zone.short_name(at)
    )
}

fn items(n: usize) -> String {
    format!("{n} {}", plural(n, "item", "items"))
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// Prints a refusal and returns exit 3.
fn refuse(message: &str) -> ExitCode {
    let _ = writeln!(io::stderr(), "mihari: {}", inert(message));
    ExitCode::from(EXIT_UNKNOWN)
}

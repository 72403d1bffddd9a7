//! `mihari show JOB [--json]`: one job's log tail, read on this machine, for a human or for
//! the fleet screen on another machine, which asks for it over ssh. Nothing here judges the job.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::core::text::inert;

use super::jobside::{finish, refuse};

/// `mihari show JOB [--json]`: the job's log tail as the dashboard's detail shows it (the
/// last lines, and those before them in its rotated predecessor), read on this machine. The
/// fleet screen asks a host for it over ssh. Every line is made inert. Exit 0, or 3 for a
/// refused jobs file or an unknown job.
pub fn show(config: Option<&Path>, job: &str, json: bool, out: &mut impl Write) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(spec) = config.jobs.iter().find(|j| j.id == job) else {
        return refuse(&format!(
            "no job '{}' in '{}'",
            inert(job),
            config.source.display()
        ));
    };
    let (lines, earlier) = match &spec.log {
        Some(path) => crate::probe::tail::log_tail(path, SHOWN_TAIL_LINES),
        None => (crate::core::Reading::Empty, None),
    };
    let (tail, fault) = match lines {
        crate::core::Reading::Found(lines) => (lines, None),
        crate::core::Reading::Empty => (Vec::new(), None),
        crate::core::Reading::Fault(why) => (Vec::new(), Some(why)),
    };
    let tail: Vec<String> = tail.iter().map(|l| inert(l)).collect();
    let written = if json {
        let value = serde_json::json!({
            "id": spec.id,
            "log": spec.log.as_ref().map(|p| inert(&p.display().to_string())),
            "tail": tail,
            "tail_fault": fault.as_deref().map(inert),
            "earlier": earlier.as_ref().map(|e| serde_json::json!({
                "path": inert(&e.path.display().to_string()),
                "lines": e.lines.iter().map(|l| inert(l)).collect::<Vec<_>>(),
            })),
        });
        writeln!(out, "{value}")
    } else {
        let mut all: Vec<String> = earlier
            .map(|e| e.lines.iter().map(|l| inert(l)).collect())
            .unwrap_or_default();
        all.extend(tail);
        if let Some(why) = fault {
            all.push(format!("(the log cannot be read: {})", inert(&why)));
        }
        all.iter().try_for_each(|line| writeln!(out, "{line}"))
    };
    finish(written.and_then(|()| out.flush()))
}

/// As many lines as the dashboard's detail asks for.
const SHOWN_TAIL_LINES: usize = crate::tui::model::TAIL_LINES;

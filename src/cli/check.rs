//! `mihari check`: one assessment of every job, printed as a table, JSON, Prometheus text or
//! the Monitoring Plugins format.
//!
//! The exit code follows the Nagios convention so cron, systemd and monitoring systems can
//! act on it: 0 OK, 1 WARNING (STALE or DISPATCH), 2 CRITICAL (RESTART or RED), 3 UNKNOWN
//! (bad config, cannot assess). What it prints is written by [`crate::render`].

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use crate::core::text::inert;

pub use crate::render::{
    CheckFormat, EXIT_UNKNOWN, assess_and_render, render_json, render_table, status_code,
};

pub(super) fn run(config: Option<&Path>, format: CheckFormat, out: &mut impl Write) -> ExitCode {
    // A plugin's reader (Nagios, Icinga, NRPE) shows stdout only: say UNKNOWN there too,
    // with the refusal's first line (file:line:col and why).
    if format == CheckFormat::Nagios
        && let Err(error) =
            crate::config::find_config_path(config).and_then(|path| crate::config::load(&path))
    {
        let said = error.to_string();
        let first = said.lines().next().unwrap_or("").replace('|', "/");
        let _ = writeln!(out, "MIHARI UNKNOWN - {}", inert(&first));
        let _ = writeln!(io::stderr(), "mihari: {said}");
        return ExitCode::from(EXIT_UNKNOWN);
    }
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let (snapshot, written) = assess_and_render(config, format, out);
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::from(status_code(&snapshot)),
        // A closed pipe (`mihari check | head`) is not a reason to report UNKNOWN.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::from(status_code(&snapshot))
        }
        Err(error) => {
            let _ = writeln!(io::stderr(), "mihari: cannot write the report: {error}");
            ExitCode::from(EXIT_UNKNOWN)
        }
    }
}

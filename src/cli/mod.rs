//! The command line: clap definitions and one entry point per subcommand.
//!
//! Each entry point loads what it needs, asks the engine, writes through a generic writer and
//! returns an [`ExitCode`]. Nothing here judges a job; nothing here draws a screen.

pub mod adopt;
mod check;
pub mod decide;
pub mod digest;
mod follow;
pub mod jobside;
pub mod shell;
mod show;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config;

pub use check::{CheckFormat, assess_and_render, render_json, render_table, status_code};

/// mihari (見張り, "the lookout"): which of your long-running jobs need a human, in what order.
#[derive(Debug, Parser)]
#[command(name = "mihari", version, about, long_about = None)]
pub struct Cli {
    /// The jobs file. Default: $MIHARI_CONFIG, else $XDG_CONFIG_HOME/mihari/jobs.yaml,
    /// else ~/.config/mihari/jobs.yaml.
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Set by `mihari fleet` when it carries out a decision confirmed on its screen: the
    /// operator and the machine it was confirmed on, recorded in every event this command
    /// writes (and the decision counts as the operator's, not a headless --yes).
    #[arg(long, global = true, value_name = "OPERATOR@HOST")]
    pub from_fleet: Option<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The dashboard: the action list, live (also what `mihari` alone opens).
    Tui,
    /// Assess every job once and print the action list. Exit 0 OK, 1 WARNING
    /// (STALE/DISPATCH), 2 CRITICAL (RESTART/RED), 3 UNKNOWN (bad config, cannot assess).
    Check {
        /// One JSON object (see the README for its fields).
        #[arg(long, conflicts_with_all = ["prometheus", "nagios"])]
        json: bool,
        /// Prometheus text exposition format (the names `promtool check metrics` accepts).
        #[arg(long, conflicts_with = "nagios")]
        prometheus: bool,
        /// The Monitoring Plugins format, for Nagios, Icinga and NRPE: a first line with
        /// performance data, then one line per job that needs a human.
        #[arg(long)]
        nagios: bool,
        /// With --json: one object per line, a new one whenever anything shown changes,
        /// and at least every 30 s; runs until its reader goes or SIGTERM/SIGINT.
        #[arg(long, requires = "json", conflicts_with_all = ["prometheus", "nagios"])]
        follow: bool,
    },
    /// A sandbox of real, simulated jobs showing every state and bucket, with the
    /// dashboard on it (or one `check` printed, when the output is not a terminal).
    Demo {
        /// Build the sandbox here (created if missing; kept afterwards) instead of a temp dir.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Print one `check` of the sandbox instead of opening the dashboard.
        #[arg(long)]
        check: bool,
    },
    /// Several hosts at once: each host's own `mihari check --json`, over the
    /// fleet file's ssh, merged in the fixed order with a host column. An unreachable host is
    /// RED, never dropped. Exit: the worst of the hosts' codes.
    Fleet {
        /// The fleet file. Default: $MIHARI_FLEET, else $XDG_CONFIG_HOME/mihari/fleet.yaml,
        /// else ~/.config/mihari/fleet.yaml.
        #[arg(long, value_name = "FILE")]
        fleet: Option<PathBuf>,
        /// Without one: the fleet screen, one live action list over every host.
        #[command(subcommand)]
        command: Option<FleetCommand>,
    },
    /// The machine watcher: keeps watch when no one looks, restarts only what the rules
    /// allow, escalates the four kinds at once and queues the rest for the daily digest.
    /// One per state_dir (exit 75 if another runs). `--once`: one pass, `check`'s codes.
    Watch {
        /// One pass, for cron or a systemd timer.
        #[arg(long)]
        once: bool,
        /// With --once: how often the timer runs it, in seconds (a pass older than twice this
        /// means nothing is watching).
        #[arg(long, default_value_t = 300, value_name = "SEC")]
        interval: u64,
    },
    /// Restart a job (RESTART and DISPATCH rows): shows what will run, asks, then spawns
    /// `mihari run JOB` detached and verifies it takes the lock. Exit 0 done, 1 not done
    /// (declined, refused, suppressed, duplicate), 2 failed, 3 bad config.
    Restart {
        job: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Remove the lock of a job whose holder is dead (DEAD_LOCK_STALE), re-checking it right
    /// before removing. Exit codes as for restart.
    Release {
        job: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Remove a stale marker of a job (its holder gone, or bare and older than
    /// stale_after_sec): shows its age, its content, the job's last attempts and last error,
    /// asks, then removes it, re-checking it first. Exit codes as for restart.
    ReleaseMarker {
        job: String,
        /// The marker: its path, or its file name (default: the job's only stale marker).
        path: Option<PathBuf>,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Pause a job on purpose: PAUSED until resumed — nobody restarts it, nothing escalates
    /// it, every daily digest names it. Exit codes as for restart.
    Pause {
        job: String,
        /// Why, for whoever looks next (required).
        #[arg(long, value_name = "R")]
        reason: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Resume a paused job: it is judged as usual again. Exit codes as for restart.
    Resume {
        job: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Acknowledge a job's broken rules (a failed restart, the cap spent, a duplicate spawn,
    /// exited 0 short of its total) with a reason: they end, and the job leaves RED. Exit
    /// codes as for restart.
    Ack {
        job: String,
        /// What you found, for whoever looks next (required).
        #[arg(long, value_name = "R")]
        reason: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Print a job stanza for a process already running, to paste under 'jobs:': its exact
    /// command line as process.cmdline, the file its output goes to as log, its argv and cwd
    /// as restart, and comments on what to decide. Exit 0 printed, 3 bad --id, 65 an argv a
    /// jobs file cannot hold, 66 no such process, 77 not yours to inspect.
    Adopt {
        pid: u32,
        /// The job's id (default: from the program's name, made a valid id).
        #[arg(long, value_name = "ID")]
        id: Option<String>,
    },
    /// Run a job's command under its lock: flock, a JSON lock with pid and start time, its
    /// output copied into its log (following a rotation; SIGHUP opens the log again), other
    /// signals forwarded, the exit code recorded, the lock removed on exit. Exit 75 when the
    /// job is already running, 69 when it is paused (nothing runs).
    Run(jobside::RunArgs),
    /// Record a heartbeat for a job: a progress source carrying done, total and position.
    Heartbeat(jobside::HeartbeatArgs),
    /// Approvals of irreversible steps: a job requests, the operator approves or denies.
    #[command(subcommand)]
    Approval(jobside::ApprovalCommand),
    /// Claim a key exactly once: exit 0 for the one winner, 1 for every duplicate (recorded).
    Claim(jobside::ClaimArgs),
    /// The event log, oldest first (`--json`: one object per line).
    Events(jobside::EventsArgs),
    /// A job's log tail, as the dashboard's detail shows it (`--json`: one object, what the
    /// fleet screen asks a host for). Exit 0, or 3 for an unknown job.
    Show {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// The daily digest: everything that did not interrupt anyone, grouped by job.
    Digest(digest::DigestArgs),
    /// Shell completions for bash, zsh, fish, elvish or powershell, on stdout.
    Completions { shell: clap_complete::Shell },
    /// The man page (roff), on stdout.
    Man,
    /// A simulated job of the demo (internal).
    #[command(hide = true)]
    Sim(crate::demo::sim::SimArgs),
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Every host's verdicts, merged: a table, or one JSON object with `host` on every job
    /// and a `hosts` list.
    Check {
        #[arg(long)]
        json: bool,
    },
}

/// Runs the parsed command line; the process exits with the returned code.
pub fn run(cli: Cli) -> ExitCode {
    if let Some(origin) = &cli.from_fleet {
        let (operator, host) = origin.rsplit_once('@').unwrap_or((origin.as_str(), "?"));
        crate::store::decided_from_fleet(operator, host);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Some(Command::Check {
            json: true,
            follow: true,
            ..
        }) => match load_config(cli.config.as_deref()) {
            Ok(config) => ExitCode::from(follow::run(config, &mut out)),
            Err(code) => code,
        },
        Some(Command::Check {
            json,
            prometheus,
            nagios,
            ..
        }) => {
            let format = if json {
                CheckFormat::Json
            } else if prometheus {
                CheckFormat::Prometheus
            } else if nagios {
                CheckFormat::Nagios
            } else {
                CheckFormat::Table
            };
            check::run(cli.config.as_deref(), format, &mut out)
        }
        Some(Command::Demo { dir, check }) => {
            let dashboard = !check && std::io::IsTerminal::is_terminal(&std::io::stdout());
            crate::demo::run(dir.as_deref(), dashboard, &mut out)
        }
        Some(Command::Sim(args)) => crate::demo::sim::run(args),
        Some(Command::Fleet {
            fleet,
            command: Some(FleetCommand::Check { json }),
        }) => fleet_check(fleet.as_deref(), json, &mut out),
        Some(Command::Fleet {
            fleet,
            command: None,
        }) => {
            drop(out);
            match config::find_fleet_path(fleet.as_deref()).and_then(|p| config::load_fleet(&p)) {
                Ok(fleet) => crate::fleet::screen::run(fleet),
                Err(error) => {
                    let _ = writeln!(std::io::stderr(), "mihari: {error}");
                    ExitCode::from(check::EXIT_UNKNOWN)
                }
            }
        }
        Some(Command::Watch { once, interval }) => {
            drop(out);
            match load_config(cli.config.as_deref()) {
                Ok(config) => crate::watch::run(config, once, interval),
                Err(code) => code,
            }
        }
        Some(Command::Restart { job, yes }) => {
            decide::restart(cli.config.as_deref(), &job, yes, &mut out)
        }
        Some(Command::Release { job, yes }) => {
            decide::release(cli.config.as_deref(), &job, yes, &mut out)
        }
        Some(Command::ReleaseMarker { job, path, yes }) => {
            decide::release_marker(cli.config.as_deref(), &job, path.as_deref(), yes, &mut out)
        }
        Some(Command::Pause { job, reason, yes }) => decide::note(
            cli.config.as_deref(),
            crate::engine::Action::Pause,
            &job,
            Some(&reason),
            yes,
            &mut out,
        ),
        Some(Command::Resume { job, yes }) => decide::note(
            cli.config.as_deref(),
            crate::engine::Action::Resume,
            &job,
            None,
            yes,
            &mut out,
        ),
        Some(Command::Ack { job, reason, yes }) => decide::note(
            cli.config.as_deref(),
            crate::engine::Action::Acknowledge,
            &job,
            Some(&reason),
            yes,
            &mut out,
        ),
        Some(Command::Adopt { pid, id }) => {
            adopt::run(cli.config.as_deref(), pid, id.as_deref(), &mut out)
        }
        Some(Command::Run(args)) => jobside::run(cli.config.as_deref(), args),
        Some(Command::Heartbeat(args)) => jobside::heartbeat(cli.config.as_deref(), args),
        Some(Command::Approval(command)) => {
            jobside::approval(cli.config.as_deref(), command, &mut out)
        }
        Some(Command::Claim(args)) => jobside::claim(cli.config.as_deref(), args),
        Some(Command::Events(args)) => jobside::events(cli.config.as_deref(), args, &mut out),
        Some(Command::Show { job, json }) => {
            show::show(cli.config.as_deref(), &job, json, &mut out)
        }
        Some(Command::Digest(args)) => digest::run(cli.config.as_deref(), args, &mut out),
        Some(Command::Completions { shell: which }) => shell::completions(which, &mut out),
        Some(Command::Man) => shell::man(&mut out),
        Some(Command::Tui) | None => {
            drop(out);
            match load_config(cli.config.as_deref()) {
                Ok(config) => crate::tui::run_with(config),
                Err(code) => code,
            }
        }
    }
}

/// Loads the jobs file named by `--config` or the environment, printing a refusal to stderr.
pub(crate) fn load_config(explicit: Option<&std::path::Path>) -> Result<config::Config, ExitCode> {
    let loaded = config::find_config_path(explicit).and_then(|path| config::load(&path));
    loaded.map_err(|error| {
        let _ = writeln!(std::io::stderr(), "mihari: {error}");
        ExitCode::from(check::EXIT_UNKNOWN)
    })
}

/// `mihari fleet check [--json]`.
fn fleet_check(path: Option<&std::path::Path>, json: bool, out: &mut impl Write) -> ExitCode {
    let fleet = match config::find_fleet_path(path).and_then(|path| config::load_fleet(&path)) {
        Ok(fleet) => fleet,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "mihari: {error}");
            return ExitCode::from(check::EXIT_UNKNOWN);
        }
    };
    if let Some(note) = crate::fleet::share::refusal(&fleet.hosts) {
        let _ = writeln!(std::io::stderr(), "mihari: note: {note}");
    }
    let hosts = crate::fleet::check::ask_all(&fleet);
    let merged = crate::fleet::check::merge(&hosts);
    let written = if json {
        crate::fleet::check::render_json(&merged, out)
    } else {
        crate::fleet::check::render_table(&merged, out)
    };
    match written.and_then(|()| out.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            let _ = writeln!(
                std::io::stderr(),
                "mihari: cannot write the report: {error}"
            );
            ExitCode::from(check::EXIT_UNKNOWN)
        }
        _ => ExitCode::from(crate::fleet::check::exit_code(&hosts)),
    }
}

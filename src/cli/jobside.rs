//! The job-side commands and the operator's reading of the record: `run`, `heartbeat`,
//! `approval`, `claim`, `events`. (being written)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job's id in the jobs file.
    pub job: String,
    /// Run this route's command instead of `restart.command`.
    #[arg(long)]
    pub route: Option<String>,
    /// The run this attempt belongs to (kept across restarts of the same run).
    #[arg(long)]
    pub run_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct HeartbeatArgs {
    pub job: String,
    #[arg(long)]
    pub done: Option<u64>,
    #[arg(long)]
    pub total: Option<u64>,
    /// The last position reached ("shard 120", "epoch 3 step 400").
    #[arg(long)]
    pub position: Option<String>,
    #[arg(long)]
    pub note: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalCommand {
    /// Ask for approval of an irreversible step. Exit 0 approved, 10 pending, 11 denied.
    Request {
        job: String,
        /// The step: delete, overwrite, publish, send, charge, ...
        #[arg(long)]
        step: String,
        /// The request's key, derived from its content by the job.
        #[arg(long, conflicts_with = "key_from", required_unless_present = "key_from")]
        key: Option<String>,
        /// Derive the key as the sha256 of this file's content.
        #[arg(long, value_name = "FILE")]
        key_from: Option<PathBuf>,
        /// One line for the operator: what will happen.
        #[arg(long)]
        summary: String,
    },
    /// The approval requests (pending ones, unless --all).
    List {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        all: bool,
    },
    /// Approve a pending request: asks you to type the job id, unless --yes.
    Approve {
        key: String,
        #[arg(long)]
        yes: bool,
    },
    /// Deny a pending request, with a reason: asks you to type the job id, unless --yes.
    Deny {
        key: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Args)]
pub struct ClaimArgs {
    pub key: String,
    /// The job the claim is about, for the record.
    #[arg(long)]
    pub job: Option<String>,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub job: Option<String>,
    #[arg(long)]
    pub kind: Option<String>,
    /// RFC 3339 time, or an age such as 30m, 2h, 7d.
    #[arg(long)]
    pub since: Option<String>,
}

pub fn run(config: Option<&Path>, args: RunArgs) -> ExitCode {
    let _ = (config, args);
    ExitCode::from(3)
}

pub fn heartbeat(config: Option<&Path>, args: HeartbeatArgs) -> ExitCode {
    let _ = (config, args);
    ExitCode::from(3)
}

pub fn approval(config: Option<&Path>, command: ApprovalCommand, out: &mut impl Write) -> ExitCode {
    let _ = (config, command, out);
    ExitCode::from(3)
}

pub fn claim(config: Option<&Path>, args: ClaimArgs) -> ExitCode {
    let _ = (config, args);
    ExitCode::from(3)
}

pub fn events(config: Option<&Path>, args: EventsArgs, out: &mut impl Write) -> ExitCode {
    let _ = (config, args, out);
    ExitCode::from(3)
}

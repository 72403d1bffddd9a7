//! `mihari digest`. (being written)

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct DigestArgs {
    /// One JSON object per digest.
    #[arg(long)]
    pub json: bool,
    /// Every digest, delivered ones included, and the queue not cut yet.
    #[arg(long)]
    pub all: bool,
}

pub fn run(config: Option<&Path>, args: DigestArgs, out: &mut impl Write) -> ExitCode {
    let _ = (config, args, out);
    ExitCode::from(3)
}

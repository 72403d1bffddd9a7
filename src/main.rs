//! The `mihari` binary: parse the command line, run it, exit with its code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let _ = color_eyre::install();
    mihari::cli::run(mihari::cli::Cli::parse())
}

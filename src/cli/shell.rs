//! `mihari completions SHELL` and `mihari man`. (being written)

use std::io::Write;
use std::process::ExitCode;

pub fn completions(shell: clap_complete::Shell, out: &mut impl Write) -> ExitCode {
    let _ = (shell, out);
    ExitCode::from(3)
}

pub fn man(out: &mut impl Write) -> ExitCode {
    let _ = out;
    ExitCode::from(3)
}

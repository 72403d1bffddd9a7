//! `mihari completions SHELL` and `mihari man`: the command line describing itself.
//!
//! Both are generated from the clap definition in [`crate::cli::Cli`] at run time, so they can
//! never drift from the flags the binary really accepts. This module owns only the rendering
//! and the delivery of that text; it reads no jobs file, touches no state store and judges
//! nothing.
//!
//! Everything is rendered into memory first and written in one go. That keeps a failed write
//! — `mihari man | head`, a full disk — a plain exit code: `clap_complete` panics when its
//! writer fails, and a half-written completion script is worse than none.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::CommandFactory;

use super::Cli;

/// The name the completions are registered for and the man pages are titled with. It is fixed
/// rather than taken from `argv[0]`, so a binary run as `./target/release/mihari` still
/// completes the `mihari` on the user's PATH.
const BIN_NAME: &str = "mihari";

/// The exit code when the text could not be written (other than the reader going away): the
/// caller's redirect, such as an install step, must not look as if it succeeded.
const EXIT_NOT_WRITTEN: u8 = 1;

/// Writes the completion script for `shell` to `out`.
///
/// The script is registered for the command `mihari`, whatever this binary is called, so the
/// output can be dropped straight into the shell's completion folder.
pub fn completions(shell: clap_complete::Shell, out: &mut impl Write) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, &mut script);
    deliver(&script, "completions", out)
}

/// Writes the man pages, in roff, to `out`: the page of `mihari` itself, then one page per
/// visible subcommand (`mihari-check`, `mihari-approval-request`, ...), depth first.
///
/// The root page alone lists the subcommands with a single line each; their flags, exit codes
/// and arguments live only on their own pages. Since there is one stream and no folder to
/// install into, the pages follow one another; `man -l -` shows them as one long document,
/// each page starting with its own title line.
pub fn man(out: &mut impl Write) -> ExitCode {
    match man_pages() {
        Ok(roff) => deliver(&roff, "the man page", out),
        Err(error) => {
            let _ = writeln!(
                io::stderr(),
                "mihari: cannot render the man page: '{error}'"
            );
            ExitCode::from(EXIT_NOT_WRITTEN)
        }
    }
}

/// Renders the root page followed by every visible subcommand's page.
///
/// The implicit `help` subcommand is left out, as `clap_mangen::generate_to` does: it would
/// get a page of its own that only says "print help". Hidden subcommands (the demo's `sim`)
/// get no page; they are not for people.
fn man_pages() -> io::Result<Vec<u8>> {
    let mut root = Cli::command().name(BIN_NAME).disable_help_subcommand(true);
    // Building fills in each subcommand's display name ("mihari-check"), which becomes the
    // title of its page and the name it is cross-referenced by on the page above it.
    root.build();
    let mut roff = Vec::new();
    render_page(&root, &mut roff)?;
    render_subcommand_pages(&root, &mut roff)?;
    Ok(roff)
}

/// Appends the pages of `parent`'s visible subcommands, each followed by its own subcommands.
fn render_subcommand_pages(parent: &clap::Command, roff: &mut Vec<u8>) -> io::Result<()> {
    for sub in parent.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        render_page(sub, roff)?;
        render_subcommand_pages(sub, roff)?;
    }
    Ok(())
}

/// Appends one page. Every page names the same source ("mihari 0.1.0"): left alone,
/// `clap_mangen` would print a subcommand's own name and an empty version in the footer.
///
/// The date is a single space, not empty: `clap_mangen` 0.3 writes an empty date as nothing
/// at all, so `.TH` loses an argument and the source lands in the date's place and the manual
/// in the source's. A quoted blank keeps every field where `man` looks for it. There is no
/// honest date to put there: the page is generated from whatever binary is running.
fn render_page(command: &clap::Command, roff: &mut Vec<u8>) -> io::Result<()> {
    clap_mangen::Man::new(command.clone())
        .date(" ")
        .source(format!("{BIN_NAME} {}", env!("CARGO_PKG_VERSION")))
        .manual("User Commands")
        .render(roff)
}

/// Writes the rendered text and maps the outcome to an exit code.
///
/// A reader that goes away early (`mihari man | head`) took what it wanted: that is success,
/// as it is for `mihari check`. Any other failure is said on stderr and is exit 1, so
/// `mihari completions bash > file` on a full disk does not pass for installed.
fn deliver(text: &[u8], what: &str, out: &mut impl Write) -> ExitCode {
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(io::stderr(), "mihari: cannot write {what}: '{error}'");
            ExitCode::from(EXIT_NOT_WRITTEN)
        }
    }
}

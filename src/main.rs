//! The `mihari` binary: parse the command line, run it, exit with its code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let _ = color_eyre::install();
    match mihari::cli::Cli::try_parse() {
        Ok(cli) => mihari::cli::run(cli),
        Err(error) => usage_error(&error),
    }
}

/// Prints clap's message and picks the exit code. A plugin run by Nagios, Icinga or NRPE
/// must exit 3 (UNKNOWN) when it cannot do its job — clap's own 2 would read as CRITICAL,
/// paging someone over a typo in a service definition — so `check --nagios` exits 3 on a
/// usage error, with a plugin's first line on stdout; everything else keeps clap's 2, and
/// --help / --version exit 0.
fn usage_error(error: &clap::Error) -> ExitCode {
    let _ = error.print();
    let code = error.exit_code();
    if code != 0 && std::env::args_os().any(|arg| arg == "--nagios") {
        // Nagios shows only stdout: the plugin's one line says what is wrong.
        let text = error.render().to_string();
        let first = text.lines().next().unwrap_or_default();
        let first = first.strip_prefix("error: ").unwrap_or(first);
        println!("MIHARI UNKNOWN - usage: {first}");
        return ExitCode::from(3);
    }
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}

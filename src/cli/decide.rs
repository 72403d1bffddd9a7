//! The human decisions from a shell: `restart`, `release`, `approval approve|deny`. (being written)

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// `mihari approval approve KEY [--yes]`.
pub fn approve(config: Option<&Path>, key: &str, yes: bool, out: &mut impl Write) -> ExitCode {
    let _ = (config, key, yes, out);
    ExitCode::from(3)
}

/// `mihari approval deny KEY --reason R [--yes]`.
pub fn deny(
    config: Option<&Path>,
    key: &str,
    reason: &str,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    let _ = (config, key, reason, yes, out);
    ExitCode::from(3)
}

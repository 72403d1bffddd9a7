//! Finding, reading and validating the jobs file. Stub: the real loader replaces it.

use std::fmt;
use std::path::{Path, PathBuf};

use super::Config;

/// Why the jobs file was refused. `Display` gives `file:line:col: message`, or `file: message`
/// when there is no position (a missing or unreadable file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based line and column of the offending value, when the refusal has a position.
    pub position: Option<(u64, u64)>,
    /// What is wrong, the offending value in 'single quotes', and what would be accepted.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => {
                write!(f, "{}:{line}:{column}: {}", self.path.display(), self.message)
            }
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Where the jobs file is: `explicit` (`--config`), else `$MIHARI_CONFIG`, else
/// `$XDG_CONFIG_HOME/mihari/jobs.yaml`, else `~/.config/mihari/jobs.yaml`.
pub fn find_config_path(explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let _ = explicit;
    todo!()
}

/// Reads, checks the permissions of, and validates the jobs file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let _ = path;
    todo!()
}

/// Validates `source` as the jobs file at `path`, without touching the file system.
pub fn load_str(source: &str, path: &Path) -> Result<Config, ConfigError> {
    let _ = (source, path);
    todo!()
}

//! The fleet file (SPEC §11): the hosts `mihari fleet` reaches over ssh, each with its own
//! jobs file and its own `mihari`.
//!
//! ```yaml
//! hosts:
//!   - name: gpu1
//!     ssh: [ssh, -o, BatchMode=yes, ops@gpu1]   # the argv that reaches the host
//!     config: /home/ops/.config/mihari/jobs.yaml # the jobs file there (default: its own)
//!     mihari: /usr/local/bin/mihari              # the binary there (default: mihari)
//!     timeout_sec: 10                            # how long one answer may take
//!     share_ssh: true                            # one ssh connection for all its asks
//! share_ssh: true                                # the same, for every host that says nothing
//! ```
//!
//! It is read as safely as the jobs file (it names commands that run: the same permission
//! and folder rules) and refused whole, with file:line:col, on any mistake. Paths in it are
//! the remote host's and are never resolved here.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::diagnose::{Pos, Source, quote};
use super::{
    ConfigError, ConfigFile, check_folders, check_not_writable_by_others, check_owner,
    find_file_with, open_regular,
};

/// A fleet file larger than this is refused: a fleet of thousands of hosts fits.
const MAX_FLEET_BYTES: u64 = 4 * 1024 * 1024;

/// How long one host may take to answer, unless its `timeout_sec` says otherwise.
pub const DEFAULT_TIMEOUT_SEC: u64 = 10;

/// The fleet, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub path: PathBuf,
    pub hosts: Vec<Host>,
}

/// One host of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// `[a-z0-9][a-z0-9._-]{0,63}`: shown in every row, named in every event it causes.
    pub name: String,
    /// The argv prefix that reaches the host (`[ssh, ops@gpu1]`); empty for this machine, where
    /// `mihari` runs directly.
    pub ssh: Vec<String>,
    /// The jobs file on the host; `None` lets the host's mihari find its own.
    pub config: Option<String>,
    /// The mihari binary on the host.
    pub mihari: String,
    pub timeout: Duration,
    /// Whether mihari makes this host's asks share one ssh connection (ControlMaster) when
    /// its argv leaves that to it: `share_ssh`, the host's own else the file's, default true.
    pub share_ssh: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    hosts: Option<Spanned<Vec<Spanned<RawHost>>>>,
    share_ssh: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Option<Spanned<String>>,
    ssh: Option<Spanned<Vec<String>>>,
    config: Option<Spanned<String>>,
    mihari: Option<Spanned<String>>,
    timeout_sec: Option<Spanned<u64>>,
    share_ssh: Option<bool>,
}

/// Where the fleet file is: `explicit` (`--fleet`), else `$MIHARI_FLEET`, else
/// `$XDG_CONFIG_HOME/mihari/fleet.yaml`, else `~/.config/mihari/fleet.yaml` — the jobs
/// file's order.
pub fn find_fleet_path(explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
    find_fleet_path_with(explicit, |name| std::env::var_os(name))
}

fn find_fleet_path_with(
    explicit: Option<&Path>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, ConfigError> {
    find_file_with(explicit, &FLEET_FILE, var)
}

const FLEET_FILE: ConfigFile = ConfigFile {
    flag: "--fleet",
    variable: "MIHARI_FLEET",
    name: "fleet.yaml",
    what: "the fleet file",
    missing: "no fleet file here: create one (hosts: [{name, ssh, config, mihari}], see \
              docs/fleet.md), or pass --fleet",
};

/// Reads, checks the owner and permissions of, and validates the fleet file at `path`: opened
/// as the jobs file is ([`open_regular`]), refused as it is (its `ssh` argv runs as you).
pub fn load_fleet(path: &Path) -> Result<Fleet, ConfigError> {
    let (file, meta) = open_regular(path, &FLEET_FILE)?;
    let unreadable = |err: std::io::Error| FLEET_FILE.unreadable(path, &err);
    check_owner(path, &meta, &FLEET_FILE)?;
    check_not_writable_by_others(path, std::os::unix::fs::MetadataExt::mode(&meta))?;
    check_folders(path, "the fleet file")?;
    let mut bytes = Vec::new();
    file.take(MAX_FLEET_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FLEET_BYTES {
        return Err(ConfigError::without_position(
            path,
            "the file is larger than 4 MiB: no fleet file is this large; pass --fleet",
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        ConfigError::without_position(path, "the fleet file is not UTF-8 text: save it as UTF-8")
    })?;
    load_fleet_str(&text, path)
}

/// Validates `source` as the fleet file at `path`.
pub fn load_fleet_str(source: &str, path: &Path) -> Result<Fleet, ConfigError> {
    let src = Source { text: source, path };
    let parsed: Option<Spanned<RawFleet>> =
        serde_saphyr::from_str_with_options(source, super::yaml_options(source.len()))
            .map_err(|err| src.yaml_error(&err))?;
    let Some(parsed) = parsed else {
        return Err(src.refuse_file(
            "the fleet file is empty: list the hosts under 'hosts:', like \
             hosts: [{name: gpu1, ssh: [ssh, ops@gpu1]}]",
        ));
    };
    let share_ssh = parsed.value.share_ssh.unwrap_or(true);
    let Some(hosts) = parsed.value.hosts else {
        return Err(src.refuse(
            Pos::of(&parsed),
            "the fleet file has no 'hosts:': list the hosts, like \
             hosts: [{name: gpu1, ssh: [ssh, ops@gpu1]}]",
        ));
    };
    if hosts.value.is_empty() {
        return Err(src.refuse(
            Pos::of(&hosts),
            "'hosts' is empty: list at least one host, like {name: gpu1, ssh: [ssh, ops@gpu1]}",
        ));
    }
    let mut seen = HashSet::new();
    let mut valid = Vec::with_capacity(hosts.value.len());
    for raw in hosts.value {
        let at = Pos::of(&raw);
        let raw = raw.value;
        let Some(name) = raw.name else {
            return Err(src.refuse(
                at,
                "a host has no 'name': give each host a short name, like name: gpu1",
            ));
        };
        if !valid_name(&name.value) {
            return Err(src.refuse(
                Pos::of(&name),
                format!(
                    "host name {} is not a valid name: use 1 to 64 of a-z, 0-9, '.', '_', '-', \
                     starting with a letter or digit, like gpu1",
                    quote(&name.value)
                ),
            ));
        }
        if !seen.insert(name.value.clone()) {
            return Err(src.refuse(
                Pos::of(&name),
                format!(
                    "host name {} is used twice: each host needs its own name",
                    quote(&name.value)
                ),
            ));
        }
        let ssh = match raw.ssh {
            None => Vec::new(),
            Some(ssh) if ssh.value.is_empty() || ssh.value[0].trim().is_empty() => {
                return Err(src.refuse(
                    Pos::of(&ssh),
                    format!(
                        "ssh of host {} is empty: write the argv that reaches it, like \
                         [ssh, -o, BatchMode=yes, ops@gpu1], or leave 'ssh' out for this machine",
                        quote(&name.value)
                    ),
                ));
            }
            Some(ssh) if ssh.value.iter().any(|arg| arg.contains('\0')) => {
                return Err(src.refuse(
                    Pos::of(&ssh),
                    "an ssh argument contains a NUL character, which no argument can hold",
                ));
            }
            Some(ssh) => ssh.value,
        };
        let text = |value: Option<Spanned<String>>, key: &str| match value {
            Some(v) if v.value.trim().is_empty() || v.value.contains('\0') => Err(src.refuse(
                Pos::of(&v),
                format!(
                    "{key} of host {} is empty or holds a NUL: write it, or leave '{key}' out",
                    quote(&name.value)
                ),
            )),
            Some(v) => Ok(Some(v.value)),
            None => Ok(None),
        };
        let config = text(raw.config, "config")?;
        let mihari = text(raw.mihari, "mihari")?.unwrap_or_else(|| "mihari".to_string());
        let timeout_sec = match raw.timeout_sec {
            Some(t) if t.value == 0 || t.value > 3600 => {
                return Err(src.refuse(
                    Pos::of(&t),
                    format!(
                        "timeout_sec {} of host {} is out of range: write 1 to 3600 seconds",
                        t.value,
                        quote(&name.value)
                    ),
                ));
            }
            Some(t) => t.value,
            None => DEFAULT_TIMEOUT_SEC,
        };
        valid.push(Host {
            name: name.value,
            ssh,
            config,
            mihari,
            timeout: Duration::from_secs(timeout_sec),
            share_ssh: raw.share_ssh.unwrap_or(share_ssh),
        });
    }
    Ok(Fleet {
        path: path.to_path_buf(),
        hosts: valid,
    })
}

fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Fleet, String> {
        load_fleet_str(text, Path::new("fleet.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_fleet_loads_with_defaults_for_what_is_left_out() {
        let fleet = load(
            "hosts:\n  - name: gpu1\n    ssh: [ssh, ops@gpu1]\n    config: /srv/jobs.yaml\n  \
             - name: local\n",
        )
        .expect("loads");
        assert_eq!(fleet.hosts.len(), 2);
        assert_eq!(fleet.hosts[0].ssh, ["ssh", "ops@gpu1"]);
        assert_eq!(fleet.hosts[0].config.as_deref(), Some("/srv/jobs.yaml"));
        assert_eq!(fleet.hosts[1].mihari, "mihari");
        assert!(fleet.hosts[1].ssh.is_empty());
        assert_eq!(
            fleet.hosts[1].timeout,
            Duration::from_secs(DEFAULT_TIMEOUT_SEC)
        );
        assert!(fleet.hosts.iter().all(|h| h.share_ssh));
    }

    #[test]
    fn sharing_ssh_is_turned_off_for_the_file_and_back_on_for_one_host() {
        let fleet = load(
            "share_ssh: false\nhosts:\n  - name: a\n    ssh: [ssh, a]\n  - name: b\n    \
             ssh: [ssh, b]\n    share_ssh: true\n",
        )
        .expect("loads");
        assert!(!fleet.hosts[0].share_ssh);
        assert!(fleet.hosts[1].share_ssh);
    }

    #[test]
    fn each_mistake_is_refused_with_its_place() {
        for (text, at, words) in [
            ("hosts: []\n", "fleet.yaml:1:8", "'hosts' is empty"),
            (
                "hosts:\n  - ssh: [ssh, a]\n",
                "fleet.yaml:2:5",
                "has no 'name'",
            ),
            (
                "hosts:\n  - name: GPU 1\n",
                "fleet.yaml:2:11",
                "not a valid name",
            ),
            (
                "hosts:\n  - name: a\n  - name: a\n",
                "fleet.yaml:3:11",
                "used twice",
            ),
            (
                "hosts:\n  - name: a\n    ssh: []\n",
                "fleet.yaml:3:10",
                "ssh of host 'a' is empty",
            ),
            (
                "hosts:\n  - name: a\n    timeout_sec: 0\n",
                "fleet.yaml:3:18",
                "out of range",
            ),
            (
                "hosts:\n  - name: a\n    sshh: [ssh]\n",
                "fleet.yaml:3:5",
                "sshh",
            ),
            ("nodes: []\n", "fleet.yaml:1:1", "nodes"),
        ] {
            let error = load(text).expect_err(text);
            assert!(
                error.starts_with(at) && error.contains(words),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn the_fleet_file_is_found_like_the_jobs_file() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let found = |explicit: Option<&str>, pairs: &'static [(&'static str, &'static str)]| {
            find_fleet_path_with(explicit.map(Path::new), vars(pairs)).expect("found")
        };
        assert_eq!(
            found(Some("/a/f.yaml"), &[("MIHARI_FLEET", "/b")]),
            Path::new("/a/f.yaml")
        );
        assert_eq!(
            found(None, &[("MIHARI_FLEET", "/b/f.yaml"), ("HOME", "/h")]),
            Path::new("/b/f.yaml")
        );
        assert_eq!(
            found(None, &[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")]),
            Path::new("/x/mihari/fleet.yaml")
        );
        assert_eq!(
            found(None, &[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")]),
            Path::new("/h/.config/mihari/fleet.yaml")
        );
    }
}

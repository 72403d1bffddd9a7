//! Finding, reading and validating the jobs file.
//!
//! This module owns the edges of loading: where the jobs file is looked for
//! ([`find_config_path`]), reading it safely ([`load`]: a regular file, not writable by
//! others, not absurdly large, UTF-8), and parsing it with limits that refuse an alias bomb
//! quickly ([`load_str`]). The refusals of SPEC §2 live in `validate`, their wording in
//! `diagnose`, the YAML's shape in `raw`; `plain` reads the plain YAML most files are written
//! in without serde-saphyr, and declines the rest to it. It must not probe the world beyond the jobs file
//! and the folders above it: whether a log or lock exists is evidence, never a config error.

mod diagnose;
pub mod fleet;
mod plain;
mod raw;
mod validate;

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::stat::Mode;
use serde_saphyr::{DuplicateKeyPolicy, Spanned};

use self::diagnose::{Source, quote};
use self::raw::RawFile;
use self::validate::Env;
pub(crate) use self::validate::{is_valid_id, suggest_id};
use super::Config;

/// A jobs file larger than this is refused before parsing: a farm of tens of thousands of
/// jobs fits, and reading an arbitrary file (a log passed by mistake) into memory must stay
/// bounded.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The YAML events aliases may replay in all. This, not the size of the file, is what stops
/// an alias bomb ("billion laughs", plain or through merge keys): an honest farm that shares
/// one stanza through `&anchor` / `*alias` in every job replays about a dozen events per job,
/// so forty thousand such jobs fit.
pub(super) const MAX_REPLAYED_EVENTS: usize = 500_000;
/// The events anchors may hold copies of, in all: a bomb nests aliases inside anchors so each
/// level holds ten times the one below; an honest anchor holds a stanza.
pub(super) const MAX_ANCHORED_EVENTS: usize = 50_000;
/// Text aliases may repeat beyond what the file itself holds: a long value aliased many
/// times is refused before it costs memory.
pub(super) const MAX_REPLAYED_SCALAR_BYTES: usize = 1024 * 1024;
/// Aliases (`*name`), anchors (`&name`) and merge keys (`<<`) a file may use: one or two per
/// job of a large farm.
pub(super) const MAX_ALIASES: usize = 200_000;
/// How deep mappings and lists may nest: a jobs file needs about six levels.
pub(super) const MAX_DEPTH: usize = 32;
/// How deep an alias may sit inside what another alias replays.
pub(super) const MAX_REPLAY_DEPTH: usize = 16;

/// Why the jobs file was refused. `Display` gives `file:line:col: message`, or `file: message`
/// when there is no position (a missing or unreadable file).
///
/// When the refusal points into the file, `message` has three lines: the refusal itself
/// (the offending value in 'single quotes' and what would be accepted), then the source
/// line and a caret under the offending text. [`ConfigError::summary`] is the first line
/// alone, for places that have room for one line only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based line and column of the offending value, when the refusal has a position.
    pub position: Option<(u64, u64)>,
    /// What is wrong, the offending value in 'single quotes', and what would be accepted.
    pub message: String,
}

impl ConfigError {
    /// The refusal without its source snippet: one line, for a status bar or a JSON field.
    pub fn summary(&self) -> &str {
        self.message.lines().next().unwrap_or_default()
    }

    fn without_position(path: &Path, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.to_path_buf(),
            position: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => {
                write!(
                    f,
                    "{}:{line}:{column}: {}",
                    self.path.display(),
                    self.message
                )
            }
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Where the jobs file is: `explicit` (`--config`), else `$MIHARI_CONFIG`, else
/// `$XDG_CONFIG_HOME/mihari/jobs.yaml`, else `~/.config/mihari/jobs.yaml`.
///
/// The first of these that is set wins, whether or not a file is there: silently falling
/// back to another file would watch a list the operator did not mean. Empty variables count
/// as unset, and a relative `$XDG_CONFIG_HOME` is ignored, as the XDG spec asks.
pub fn find_config_path(explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
    find_config_path_with(explicit, |name| std::env::var_os(name))
}

/// [`find_config_path`] with the environment passed in, so the order can be tested without
/// touching the process-global environment.
fn find_config_path_with(
    explicit: Option<&Path>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, ConfigError> {
    find_file_with(explicit, &JOBS_FILE, var)
}

/// A file mihari reads from the operator's config folder, and how it is named in words.
pub(super) struct ConfigFile {
    /// The flag that names it (`--config`).
    pub flag: &'static str,
    /// The variable that names it (`MIHARI_CONFIG`).
    pub variable: &'static str,
    /// Its name under `mihari/` in the config folder (`jobs.yaml`).
    pub name: &'static str,
    /// What it is, in words ("the jobs file").
    pub what: &'static str,
    /// What to say, and to do, when there is none.
    pub missing: &'static str,
}

const JOBS_FILE: ConfigFile = ConfigFile {
    flag: "--config",
    variable: "MIHARI_CONFIG",
    name: "jobs.yaml",
    what: "the jobs file",
    missing: "no jobs file here: create it, see jobs.example.yaml, or pass --config",
};

/// Where `file` is: `explicit` (its flag), else its variable, else
/// `$XDG_CONFIG_HOME/mihari/NAME`, else `~/.config/mihari/NAME`; the first that is set wins.
pub(super) fn find_file_with(
    explicit: Option<&Path>,
    file: &ConfigFile,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, ConfigError> {
    if let Some(explicit) = explicit {
        if explicit.as_os_str().is_empty() {
            return Err(ConfigError::without_position(
                explicit,
                format!(
                    "{} was given an empty path (''): pass the path of {}",
                    file.flag, file.what
                ),
            ));
        }
        return Ok(explicit.to_path_buf());
    }
    let set = |name: &str| {
        var(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(path) = set(file.variable) {
        return Ok(path);
    }
    if let Some(xdg) = set("XDG_CONFIG_HOME").filter(|p| p.is_absolute()) {
        return Ok(xdg.join("mihari").join(file.name));
    }
    if let Some(home) = set("HOME") {
        return Ok(home.join(".config").join("mihari").join(file.name));
    }
    Err(ConfigError::without_position(
        &Path::new("$HOME/.config/mihari").join(file.name),
        format!(
            "cannot tell where {} is: none of {}, ${}, $XDG_CONFIG_HOME, $HOME is set; pass {}",
            file.what, file.flag, file.variable, file.flag
        ),
    ))
}

/// Reads, checks the permissions of, and validates the jobs file at `path`.
///
/// The file names commands that will run, so it is refused when it belongs to another user,
/// or when it, or a folder above it without the sticky bit, is writable by group or others:
/// whoever can write there could make mihari run anything. It is opened before it is judged
/// ([`open_regular`]: a named pipe swapped in never blocks the caller), and the checks read the
/// open file's own metadata, so the file that was checked is the file that is read.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let (file, meta) = open_regular(path, &JOBS_FILE)?;
    check_owner(path, &meta, &JOBS_FILE)?;
    check_not_writable_by_others(path, meta.mode())?;
    check_folders(path, "the jobs file")?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large(path));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| unreadable(path, &err))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(too_large(path));
    }
    // A large farm's validated form, kept from the last load of these very bytes (the checks
    // above ran all the same). The key holds their hash: a save within the filesystem's
    // timestamp tick that keeps the size would otherwise be served the file before it.
    let key = super::cache::key(path, &meta, &bytes);
    if let Some(config) = key.as_ref().and_then(super::cache::lookup) {
        return Ok(config);
    }
    let text = String::from_utf8(bytes).map_err(|err| not_utf8(path, &err))?;
    let config = load_str(&text, path)?;
    if let Some(key) = &key {
        super::cache::store(key, &config);
    }
    Ok(config)
}

/// How long a refusal of a file just saved waits before the file is read again: a save that
/// truncates the file and then writes it is empty (or partial) for a moment, and an editor's
/// save is a few writes.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);
/// How long, in all, a refused read of a file just saved is tried again before the refusal
/// stands.
const SETTLE_FOR: std::time::Duration = std::time::Duration::from_millis(250);
/// A file changed (its ctime) less than this ago was "just saved".
const JUST_SAVED: std::time::Duration = std::time::Duration::from_secs(2);

/// [`load`] for a file that was just saved (a reload on a change): a refusal while the file
/// changed less than [`JUST_SAVED`] ago is read again every [`SETTLE`], for at most
/// [`SETTLE_FOR`], before it stands — a valid save in place is never refused for the moment
/// it was empty. A file that stays wrong is refused a quarter of a second later, as it was.
pub fn load_saved(path: &Path) -> Result<Config, ConfigError> {
    let started = std::time::Instant::now();
    loop {
        match load(path) {
            Err(_) if started.elapsed() < SETTLE_FOR && just_saved(path) => {
                std::thread::sleep(SETTLE);
            }
            loaded => return loaded,
        }
    }
}

/// Whether the file at `path` changed (content, mode, name) less than [`JUST_SAVED`] ago.
fn just_saved(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        // Gone for a moment: an editor's save renames one file over another.
        return true;
    };
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(
            u64::try_from(meta.ctime()).unwrap_or(0),
            u32::try_from(meta.ctime_nsec()).unwrap_or(0),
        );
    std::time::SystemTime::now()
        .duration_since(changed)
        .is_ok_and(|ago| ago < JUST_SAVED)
}

/// Opens the jobs file or the fleet file (`file`) at `path` to be read: through a link (a
/// jobs file may be one), and only when what was opened is a regular file.
///
/// The path is first opened without being read (`O_PATH`: nothing can block and nothing is
/// set off, whatever it names), that very inode is judged by its own metadata, and only then
/// opened again through `/proc/self/fd` to be read, non-blocking. Looking at the path and then
/// opening it could open something else: a named pipe swapped in between blocks the opener for
/// ever (the watcher's only loop, `mihari events`).
pub(super) fn open_regular(
    path: &Path,
    file: &ConfigFile,
) -> Result<(File, fs::Metadata), ConfigError> {
    use nix::fcntl::OFlag;
    let pinned = nix::fcntl::open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|errno| file.unreadable(path, &io::Error::from(errno)))?;
    let stat = nix::sys::stat::fstat(&pinned)
        .map_err(|errno| file.unreadable(path, &io::Error::from(errno)))?;
    let kind = stat.st_mode & libc::S_IFMT;
    if kind == libc::S_IFDIR {
        return Err(ConfigError::without_position(
            path,
            format!(
                "{} is a folder, not {}: pass the path of the file itself, like {} {}",
                quote(&path.display().to_string()),
                file.what,
                file.flag,
                path.join(file.name).display()
            ),
        ));
    }
    if kind != libc::S_IFREG {
        return Err(ConfigError::without_position(
            path,
            format!(
                "{} is {}, not a regular file: {} must be a plain file; pass {}",
                quote(&path.display().to_string()),
                crate::probe::safe_open::kind_words(stat.st_mode),
                file.what,
                file.flag
            ),
        ));
    }
    let opened = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", pinned.as_raw_fd()))
        .map_err(|err| file.unreadable(path, &err))?;
    let meta = opened
        .metadata()
        .map_err(|err| file.unreadable(path, &err))?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != (stat.st_dev, stat.st_ino) {
        return Err(ConfigError::without_position(
            path,
            format!(
                "{} changed while it was being opened; try again",
                quote(&path.display().to_string())
            ),
        ));
    }
    Ok((opened, meta))
}

/// Refuses a file that belongs to someone other than the operator or root, as OpenSSH refuses
/// another user's `authorized_keys`: it names commands that will run as the operator, and its
/// owner can change them at will, whatever its mode. Through a link, the file linked to is
/// the one judged (`meta` is the open file's).
pub(super) fn check_owner(
    path: &Path,
    meta: &fs::Metadata,
    file: &ConfigFile,
) -> Result<(), ConfigError> {
    let operator = nix::unistd::geteuid().as_raw();
    if meta.uid() == operator || meta.uid() == 0 {
        return Ok(());
    }
    let shown = path.display().to_string();
    let named = match fs::canonicalize(path) {
        Ok(real) if real != path => format!(
            "{} (a link to {})",
            quote(&shown),
            quote(&real.display().to_string())
        ),
        _ => quote(&shown),
    };
    Err(ConfigError {
        path: path.to_path_buf(),
        position: Some((1, 1)),
        message: format!(
            "{named} belongs to user {} (uid {}), not to you ({}): {} names commands that \
             will run as you, and its owner can change them; copy it to a file of your own \
             (or have root own it) and pass {} with that file",
            quote(&crate::probe::safe_open::user_name(meta.uid())),
            meta.uid(),
            quote(&crate::probe::safe_open::user_name(operator)),
            file.what,
            file.flag
        ),
    })
}

/// The settings of the jobs file at `path` read on their own, for a file [`load`] refused
/// for something outside them (a job's typo, a bad path): where the store is, so the event
/// log and the digest can still be read. A file that does not parse as YAML gives the
/// default settings only when it does not mention `state_dir` (whatever it names cannot be
/// told then); `None` when its settings cannot be told or are themselves refused.
pub fn settings_of_refused(path: &Path) -> Option<super::Settings> {
    // Opened as [`load`] opens it: a named pipe there must not hang `mihari events`, and the
    // file of another user does not choose where this user's store is.
    let (file, meta) = open_regular(path, &JOBS_FILE).ok()?;
    check_owner(path, &meta, &JOBS_FILE).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let absolute = std::path::absolute(path).ok()?;
    let src = Source { text: &text, path };
    let raw = match serde_saphyr::from_str_with_options::<Option<raw::RawSettingsAlone>>(
        &text,
        yaml_options(text.len()),
    ) {
        Ok(parsed) => parsed.and_then(|file| file.settings),
        Err(_) if !text.contains("state_dir") => None,
        Err(_) => return None,
    };
    validate::settings_alone(raw, &src, &absolute, &process_env()).ok()
}

/// `$HOME` and `$XDG_STATE_HOME`, as validation reads them.
fn process_env() -> Env {
    Env {
        home: std::env::var_os("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from),
        xdg_state_home: std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute()),
    }
}

/// Validates `source` as the jobs file at `path`, without touching the file system.
///
/// `path` names the file in refusals and anchors relative paths (its folder, made absolute
/// against the current directory when relative). `$HOME` and `$XDG_STATE_HOME` are read
/// here, for `~/` and the default `state_dir`.
pub fn load_str(source: &str, path: &Path) -> Result<Config, ConfigError> {
    load_str_with(source, path, &process_env())
}

/// [`load_str`] with the environment passed in.
fn load_str_with(source: &str, path: &Path, env: &Env) -> Result<Config, ConfigError> {
    let src = Source { text: source, path };
    let file = std::path::absolute(path).map_err(|err| {
        ConfigError::without_position(
            path,
            format!(
                "cannot make the path of the jobs file absolute ({err}); pass an absolute --config"
            ),
        )
    })?;
    if u64::try_from(source.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(too_large(path));
    }
    // The quick reader first: a file of plain YAML (most are) is read in a tenth of the time,
    // which is most of loading a farm of thousands of jobs. A file it declines, and one that
    // validation refuses, is read by serde-saphyr, whose errors word the refusal, point at it,
    // and bound what aliases may expand to.
    if let Some(parsed) = plain::read::<Option<Spanned<RawFile>>>(source)
        && let Ok(config) = validate::validate(parsed, &src, &file, env)
    {
        return Ok(config);
    }
    full_read(source, &src, &file, env)
}

/// The jobs file read by serde-saphyr and validated: every refusal's words and position.
fn full_read(
    source: &str,
    src: &Source<'_>,
    file: &Path,
    env: &Env,
) -> Result<Config, ConfigError> {
    let parsed: Option<Spanned<RawFile>> =
        serde_saphyr::from_str_with_options(source, yaml_options(source.len()))
            .map_err(|err| src.yaml_error(&err))?;
    validate::validate(parsed, src, file, env)
}

/// [`load_str`] with serde-saphyr reading every file, never the quick reader: what the tests
/// hold the quick reader to.
#[doc(hidden)]
pub fn load_str_by_serde_saphyr(source: &str, path: &Path) -> Result<Config, ConfigError> {
    let src = Source { text: source, path };
    let file = std::path::absolute(path).map_err(|err| {
        ConfigError::without_position(path, format!("cannot make the path absolute ({err})"))
    })?;
    full_read(source, &src, &file, &process_env())
}

/// Whether the quick reader reads `source` itself (it is plain YAML and valid as a jobs
/// file's raw form), rather than declining it to serde-saphyr.
#[doc(hidden)]
pub fn quick_reader_reads(source: &str) -> bool {
    plain::read::<Option<Spanned<RawFile>>>(source).is_some()
}

/// How the YAML is read: YAML 1.2 booleans only (yes/no/on/off are refused, not guessed),
/// duplicate keys refused, and budgets that bound the EXPANSION — what aliases replay, how
/// many of them, how deep — never the honest size of a file of `source_len` bytes. A node
/// takes at least a byte of the file, so the file's own size bounds its honest nodes and
/// events (and [`MAX_FILE_BYTES`] bounds the file); what aliases add on top is bounded by
/// [`MAX_REPLAYED_EVENTS`], [`MAX_ANCHORED_EVENTS`] and [`MAX_REPLAYED_SCALAR_BYTES`], so an
/// alias bomb is refused
/// after a bounded amount of work and memory, and a farm of ten thousand jobs loads.
fn yaml_options(source_len: usize) -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: DuplicateKeyPolicy::Error,
        budget: serde_saphyr::budget! {
            max_events: 2 * source_len + MAX_REPLAYED_EVENTS + 16,
            max_nodes: source_len + MAX_REPLAYED_EVENTS + 16,
            max_aliases: MAX_ALIASES,
            max_anchors: MAX_ALIASES,
            max_depth: MAX_DEPTH,
            max_merge_keys: MAX_ALIASES,
            max_total_scalar_bytes: source_len + MAX_REPLAYED_SCALAR_BYTES,
            // One anchor aliased by every job of a farm is honest: the replay budget above,
            // not a ratio of aliases to anchors, is what refuses a bomb.
            enforce_alias_anchor_ratio: false,
            max_recorded_anchor_events: MAX_ANCHORED_EVENTS,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
            max_replay_stack_depth: MAX_REPLAY_DEPTH,
            max_alias_expansions_per_anchor: MAX_ALIASES,
        },
    }
}

/// Refuses a file writable by group or others. Position 1:1: it is about the whole file.
fn check_not_writable_by_others(path: &Path, mode: u32) -> Result<(), ConfigError> {
    if mode & 0o022 == 0 {
        return Ok(());
    }
    let shown = path.display().to_string();
    Err(ConfigError {
        path: path.to_path_buf(),
        position: Some((1, 1)),
        message: format!(
            "{} has mode {}: it is writable by group or others, and it names commands that \
             will run; run: chmod go-w {}",
            quote(&shown),
            quote(&format!("{:04o}", mode & 0o7777)),
            shell_word(&shown)
        ),
    })
}

/// Refuses when a folder above the file can be changed by someone other than the operator or
/// root: it belongs to another user, or group or others can write it without the sticky bit
/// (the folder rule of [`crate::probe::safe_open::folder_writer`], which a job's lock and log
/// follow too). Whoever can change such a folder can replace the file. Both the folders as
/// written and the folders of the real file (after symlinks) count. A folder that cannot be
/// examined is skipped: the file was just opened through it, and the file's own check still
/// holds.
/// `what` names the file in the refusal ("the jobs file", "the fleet file").
fn check_folders(path: &Path, what: &str) -> Result<(), ConfigError> {
    use crate::probe::safe_open::{FolderWriter, folder_writer};
    let mut folders: Vec<PathBuf> = Vec::new();
    if let Ok(absolute) = std::path::absolute(path) {
        folders.extend(absolute.ancestors().skip(1).map(Path::to_path_buf));
    }
    if let Ok(real) = fs::canonicalize(path) {
        folders.extend(real.ancestors().skip(1).map(Path::to_path_buf));
    }
    let operator = nix::unistd::geteuid().as_raw();
    let mut seen = std::collections::HashSet::new();
    for folder in folders {
        if folder.as_os_str().is_empty() || !seen.insert(folder.clone()) {
            continue;
        }
        let Ok(meta) = fs::metadata(&folder) else {
            continue;
        };
        let mode = meta.permissions().mode();
        let Some(writer) = folder_writer(meta.uid(), mode, operator) else {
            continue;
        };
        let shown = folder.display().to_string();
        let message = match writer {
            FolderWriter::GroupOrOthers { .. } => format!(
                "the folder {} holding {what} has mode {}: it is writable by group \
                 or others without the sticky bit, so anyone there could replace the file, \
                 and it names commands that will run; run: chmod go-w {}",
                quote(&shown),
                quote(&format!("{:04o}", mode & 0o7777)),
                shell_word(&shown)
            ),
            FolderWriter::Owner(_) => format!(
                "{}, and it holds {what}, which names commands that will run; move \
                 {what} to a folder only you can write",
                writer.describe(&folder)
            ),
        };
        return Err(ConfigError {
            path: path.to_path_buf(),
            position: Some((1, 1)),
            message,
        });
    }
    Ok(())
}

/// `text` as one shell word, quoted only when it needs to be, for a command to copy.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | ':' | '@')
        });
    if plain {
        text.to_owned()
    } else {
        format!(
            "'{}'",
            crate::core::text::inert(text).replace('\'', r"'\''")
        )
    }
}

/// A jobs file that cannot be opened or read, in words that say what to do.
fn unreadable(path: &Path, err: &io::Error) -> ConfigError {
    JOBS_FILE.unreadable(path, err)
}

impl ConfigFile {
    /// This file cannot be opened or read: what to do, in words.
    pub(super) fn unreadable(&self, path: &Path, err: &io::Error) -> ConfigError {
        let (what, flag) = (self.what, self.flag);
        let message = match err.kind() {
            io::ErrorKind::NotFound => self.missing.to_owned(),
            io::ErrorKind::PermissionDenied => {
                format!("cannot read {what} ({err}): make it readable by this user, or pass {flag}")
            }
            io::ErrorKind::IsADirectory => {
                format!("is a folder, not {what}: pass the path of the file itself ({flag})")
            }
            _ => format!("cannot read {what} ({err}): check the path, or pass {flag}"),
        };
        ConfigError::without_position(path, message)
    }
}

fn too_large(path: &Path) -> ConfigError {
    ConfigError::without_position(
        path,
        format!(
            "the file is larger than {} MiB: no jobs file is this large; is this the right file? \
             pass --config",
            MAX_FILE_BYTES / 1024 / 1024
        ),
    )
}

/// Points at the first byte that is not UTF-8.
fn not_utf8(path: &Path, err: &std::string::FromUtf8Error) -> ConfigError {
    let bytes = err.as_bytes();
    let valid = &bytes[..err.utf8_error().valid_up_to()];
    // The valid prefix is UTF-8 by construction; count lines and characters in it.
    let prefix = std::str::from_utf8(valid).unwrap_or_default();
    let line = prefix.matches('\n').count() + 1;
    let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let byte = bytes.get(valid.len()).copied().unwrap_or_default();
    ConfigError {
        path: path.to_path_buf(),
        position: Some((line as u64, column as u64)),
        message: format!(
            "the file is not UTF-8 text: byte '\\x{byte:02x}' cannot start a character here; \
             save the file as UTF-8"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(explicit: Option<&str>, vars: &[(&str, &str)]) -> Result<PathBuf, ConfigError> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        find_config_path_with(explicit.map(Path::new), |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn lookup_order_is_flag_then_mihari_config_then_xdg_then_home() {
        let all = [
            ("MIHARI_CONFIG", "/m/jobs.yaml"),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(
            lookup(Some("/f.yaml"), &all).ok(),
            Some(PathBuf::from("/f.yaml"))
        );
        assert_eq!(lookup(None, &all).ok(), Some(PathBuf::from("/m/jobs.yaml")));
        assert_eq!(
            lookup(None, &all[1..]).ok(),
            Some(PathBuf::from("/x/mihari/jobs.yaml"))
        );
        assert_eq!(
            lookup(None, &all[2..]).ok(),
            Some(PathBuf::from("/h/.config/mihari/jobs.yaml"))
        );
        assert!(lookup(None, &[]).is_err());
    }

    #[test]
    fn empty_and_relative_variables_are_skipped() {
        let vars = [
            ("MIHARI_CONFIG", ""),
            ("XDG_CONFIG_HOME", "rel"),
            ("HOME", "/h"),
        ];
        assert_eq!(
            lookup(None, &vars).ok(),
            Some(PathBuf::from("/h/.config/mihari/jobs.yaml"))
        );
    }

    #[test]
    fn defaults_follow_the_environment_passed_in() {
        let path = Path::new("/etc/mihari/jobs.yaml");
        let source = "jobs: []\n";
        let xdg = Env {
            home: Some("/h".into()),
            xdg_state_home: Some("/s".into()),
        };
        let config = load_str_with(source, path, &xdg).expect("valid");
        assert_eq!(config.settings.state_dir, PathBuf::from("/s/mihari"));
        let home = Env {
            home: Some("/h".into()),
            xdg_state_home: None,
        };
        let config = load_str_with(source, path, &home).expect("valid");
        assert_eq!(
            config.settings.state_dir,
            PathBuf::from("/h/.local/state/mihari")
        );
        let neither = Env::default();
        assert!(load_str_with(source, path, &neither).is_err());
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("/a/b.yaml"), "/a/b.yaml");
        assert_eq!(shell_word("/a b/it's"), r"'/a b/it'\''s'");
    }
}
